//go:build linux

package helm

import (
	"archive/tar"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/plugreg/plugreg/tests/framework/proctest"
	corev1 "k8s.io/api/core/v1"
)

// The image, assembled as CI assembles it (deploy/image: no daemon), runs
// the chart's agents: its config says what the Dockerfile says (a
// non-root user, /data a volume, the entrypoint), and the chart's pods
// started as a runtime would start them, the image's entrypoint and then
// the container's arguments (they replace the image's command), under the
// pod's user (setpriv), from the image's own filesystem, form a cluster
// and pass their probes (startPods).
func TestImageRunsTheChartsAgents(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the image and starts four agents")
	}
	root, err := proctest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin, oci := filepath.Join(dir, "plugreg"), filepath.Join(dir, "oci")
	gobuild := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/plugreg")
	gobuild.Dir, gobuild.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := gobuild.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	assemble := exec.Command("go", "run", ".", "-bin", bin, "-out", oci)
	assemble.Dir = filepath.Join(root, "deploy", "image")
	if out, err := assemble.CombinedOutput(); err != nil {
		t.Fatalf("deploy/image: %v\n%s", err, out)
	}

	p, err := layout.FromPath(oci)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil || len(im.Manifests) != 1 {
		t.Fatalf("index: %+v %v", im, err)
	}
	img, err := p.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg := cf.Config
	if cfg.User != "65532:65532" || len(cfg.Entrypoint) != 1 || cfg.Entrypoint[0] != "/usr/local/bin/plugreg" ||
		strings.Join(cfg.Cmd, " ") != "agent -data-dir /data" {
		t.Fatalf("image config %+v", cfg)
	}
	if _, ok := cfg.Volumes["/data"]; !ok {
		t.Fatalf("image volumes %v: no /data", cfg.Volumes)
	}

	// The image's filesystem, as a runtime unpacks it.
	rootfs := filepath.Join(dir, "rootfs")
	unpack(t, mutate.Extract(img), rootfs)
	for d := rootfs; d != filepath.Dir(d) && strings.HasPrefix(d, os.TempDir()+"/"); d = filepath.Dir(d) {
		os.Chmod(d, 0o755) // the image's user must reach its entrypoint
	}
	entry := filepath.Join(rootfs, cfg.Entrypoint[0])
	imageUser := strings.Split(cfg.User, ":")[0]
	startPods(t, podsOptions{}, func(pod corev1.PodSpec) []string {
		user := imageUser
		if sc := pod.SecurityContext; sc != nil && sc.RunAsUser != nil {
			user = fmt.Sprint(*sc.RunAsUser)
		}
		if user == "0" {
			return []string{entry}
		}
		return []string{"setpriv", "--reuid", user, "--regid", user, "--clear-groups", entry}
	})
}

// unpack writes a layer's tar stream under dir, with its modes.
func unpack(t *testing.T, rc io.ReadCloser, dir string) {
	t.Helper()
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, os.FileMode(h.Mode).Perm()); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode).Perm())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
	}
}
