// Command mkimage packs local files into a single-layer image and writes it
// as a docker-archive tarball that `ctr -n k8s.io images import` accepts.
// The lab has no registry and no docker: pause, busybox and CoreDNS images
// (and any test image, such as plugreg's) are made this way and imported
// into every node's containerd by lab.sh. Timestamps are the epoch so the
// same inputs give the same digest.
//
//	mkimage -o out.tar -tag localhost/pause:local -entrypoint /pause -file ./pause:/pause:0755
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(s string) error { *m = append(*m, s); return nil }

func main() {
	var files, links, dirs, envs multi
	out := flag.String("o", "image.tar", "output docker-archive tarball")
	tag := flag.String("tag", "", "image reference, e.g. localhost/pause:local")
	entry := flag.String("entrypoint", "", "entrypoint, space separated")
	cmd := flag.String("cmd", "", "cmd, space separated")
	workdir := flag.String("workdir", "/", "working dir")
	flag.Var(&files, "file", "HOSTPATH:IMAGEPATH[:OCTALMODE] (repeatable)")
	flag.Var(&links, "symlink", "TARGET:LINKPATH (repeatable)")
	flag.Var(&dirs, "dir", "IMAGEDIR (repeatable, mode 1777 if it is /tmp)")
	flag.Var(&envs, "env", "K=V (repeatable)")
	flag.Parse()
	if *tag == "" {
		log.Fatal("-tag is required")
	}
	epoch := time.Unix(0, 0)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	seen := map[string]bool{}
	var mkdirs func(p string)
	mkdirs = func(p string) {
		p = path.Clean(p)
		if p == "/" || p == "." || seen[p] {
			return
		}
		mkdirs(path.Dir(p))
		seen[p] = true
		mode := int64(0755)
		if p == "/tmp" {
			mode = 01777
		}
		must(tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(p, "/") + "/", Mode: mode, ModTime: epoch}))
	}
	for _, d := range dirs {
		mkdirs(d)
	}
	for _, f := range files {
		parts := strings.Split(f, ":")
		if len(parts) < 2 {
			log.Fatalf("bad -file %q", f)
		}
		data, err := os.ReadFile(parts[0])
		must(err)
		mode := int64(0644)
		if len(parts) > 2 {
			m, err := strconv.ParseInt(parts[2], 8, 64)
			must(err)
			mode = m
		} else if st, err := os.Stat(parts[0]); err == nil {
			mode = int64(st.Mode().Perm())
		}
		mkdirs(path.Dir(parts[1]))
		must(tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(path.Clean(parts[1]), "/"), Mode: mode, Size: int64(len(data)), ModTime: epoch}))
		_, err = tw.Write(data)
		must(err)
	}
	sort.Strings(links)
	for _, l := range links {
		parts := strings.SplitN(l, ":", 2)
		if len(parts) != 2 {
			log.Fatalf("bad -symlink %q", l)
		}
		mkdirs(path.Dir(parts[1]))
		must(tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: strings.TrimPrefix(path.Clean(parts[1]), "/"), Linkname: parts[0], Mode: 0777, ModTime: epoch}))
	}
	must(tw.Close())
	layerBytes := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerBytes)), nil })
	must(err)
	img, err := mutate.AppendLayers(empty.Image, layer)
	must(err)
	cf, err := img.ConfigFile()
	must(err)
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Created = v1.Time{Time: epoch}
	cf.Config.Env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, envs...)
	cf.Config.WorkingDir = *workdir
	if *entry != "" {
		cf.Config.Entrypoint = strings.Fields(*entry)
	}
	if *cmd != "" {
		cf.Config.Cmd = strings.Fields(*cmd)
	}
	img, err = mutate.ConfigFile(img, cf)
	must(err)
	ref, err := name.NewTag(*tag)
	must(err)
	must(tarball.WriteToFile(*out, ref, img))
	d, _ := img.Digest()
	fmt.Printf("wrote %s (%s) digest %s\n", *out, ref.String(), d)
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
