// Command image assembles plugreg's container image without a container
// daemon, with go-containerregistry: one layer holding the static binary
// at /usr/local/bin/plugreg, and the config the Dockerfile gives (user
// 65532, /data a volume, the entrypoint and command), written as an OCI
// image layout. CI has no daemon and reaches no registry, so the base is
// empty (the binary is static) where the Dockerfile's is distroless
// (docs/kubernetes.md says what that changes).
//
//	go run . -bin /path/to/plugreg -out /tmp/plugreg-oci [-tag dev]
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Config is the image's runtime config, as the Dockerfile sets it.
var Config = v1.Config{
	User:       "65532:65532",
	Entrypoint: []string{"/usr/local/bin/plugreg"},
	Cmd:        []string{"agent", "-data-dir", "/data"},
	Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
	Volumes:    map[string]struct{}{"/data": {}},
	WorkingDir: "/",
	ExposedPorts: map[string]struct{}{
		"7700/tcp": {}, "7300/tcp": {}, "7301/tcp": {}, "7301/udp": {},
	},
}

func main() {
	bin := flag.String("bin", "", "the static plugreg binary (CGO_ENABLED=0)")
	out := flag.String("out", "", "directory to write the OCI image layout to (created)")
	tag := flag.String("tag", "dev", "the image's org.opencontainers.image.ref.name")
	flag.Parse()
	if *bin == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "image: -bin and -out are required")
		os.Exit(2)
	}
	if err := build(*bin, *out, *tag); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func build(bin, out, tag string) error {
	b, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(rootfs(b))), nil })
	if err != nil {
		return fmt.Errorf("layer: %w", err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Config = Config
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	p, err := layout.Write(out, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag}))
}

// rootfs is the layer: the directories and the binary, root-owned, with a
// fixed time (the same binary makes the same layer).
func rootfs(bin []byte) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	t := time.Unix(0, 0)
	for _, d := range []string{"usr/", "usr/local/", "usr/local/bin/", "data/", "tmp/"} {
		mode := int64(0o755)
		if d == "tmp/" {
			mode = 0o1777
		}
		if d == "data/" {
			// The volume's mount point, the image user's (a runtime
			// copies it into a new volume).
			tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o700, Uid: 65532, Gid: 65532, ModTime: t})
			continue
		}
		tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: mode, ModTime: t})
	}
	tw.WriteHeader(&tar.Header{Name: "usr/local/bin/plugreg", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bin)), ModTime: t})
	tw.Write(bin)
	tw.Close()
	return buf.Bytes()
}
