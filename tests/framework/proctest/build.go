//go:build linux

package proctest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Module is the module path of the repository Build builds from.
const Module = "github.com/plugreg/plugreg"

// builds caches Build's binaries for the test binary's run.
var builds struct {
	mu  sync.Mutex
	dir string // holds every binary; RemoveBuilds removes it
	m   map[string]*build
}

type build struct {
	once sync.Once
	bin  string
	err  error
}

// Build builds pkg, a package of this repository ("./cmd/plugreg", or its
// import path), and returns the binary's path. It builds with -race when
// the test binary runs with it (RaceEnabled). Each package is built once
// per run of the test binary, however many tests ask; the binaries stay
// until RemoveBuilds.
//
// go test's result cache does not see the sources of a binary the test
// builds (they need not be linked into the test binary). Build therefore
// stats each of them: go test records the files a test looks at and
// checks them again before it answers with a cached result, but only those
// inside the test's own module. A test of this module is rerun when a
// source of the binary changed; a test of a nested module (compat/kubelet)
// needs -count=1.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	builds.mu.Lock()
	if builds.m == nil {
		builds.m = make(map[string]*build)
	}
	if builds.dir == "" {
		dir, err := os.MkdirTemp("", "proctest-bin-")
		if err != nil {
			builds.mu.Unlock()
			t.Fatal(err)
		}
		builds.dir = dir
	}
	b := builds.m[pkg]
	if b == nil {
		b = &build{bin: filepath.Join(builds.dir, fmt.Sprint(len(builds.m)), path.Base(pkg))}
		builds.m[pkg] = b
	}
	builds.mu.Unlock()
	b.once.Do(func() {
		start := time.Now()
		if b.err = goBuild(pkg, b.bin); b.err == nil {
			t.Logf("built %s (race %v) in %v", pkg, RaceEnabled, time.Since(start).Round(time.Millisecond))
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.bin
}

func goBuild(pkg, bin string) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return err
	}
	args := []string{"build", "-buildvcs=false", "-o", bin}
	if RaceEnabled {
		args = append(args, "-race")
	}
	args = append(args, pkg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...) // go test puts its own go first in PATH
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s (in %s): %v\n%s", strings.Join(args, " "), root, err, out)
	}
	return statSources(ctx, root, pkg)
}

// statSources stats the files of this repository that pkg is built from
// (see Build).
func statSources(ctx context.Context, root, pkg string) error {
	cmd := exec.CommandContext(ctx, "go", "list", "-deps", "-f",
		`{{if and .Module (eq .Module.Path "`+Module+`")}}{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}
{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}
{{end}}{{end}}`, pkg)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("go list -deps %s (in %s): %v", pkg, root, err)
	}
	files := []string{filepath.Join(root, "go.mod"), filepath.Join(root, "go.sum")}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if f := strings.TrimSpace(sc.Text()); f != "" {
			files = append(files, f)
		}
	}
	for _, f := range files {
		os.Stat(f) // recorded by go test; the result does not matter here
	}
	return nil
}

// RemoveBuilds removes the binaries Build made. Call it after the tests,
// from TestMain (see Main).
func RemoveBuilds() {
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if builds.dir != "" {
		os.RemoveAll(builds.dir)
	}
	builds.dir, builds.m = "", nil
}

// Main runs the tests and then RemoveBuilds: TestMain of a package that
// calls Build.
//
//	func TestMain(m *testing.M) { proctest.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	RemoveBuilds()
	os.Exit(code)
}

// RepoRoot is the repository's root: the nearest directory, from the
// working directory up, whose go.mod declares module Module (a test of a
// nested module, such as compat/kubelet, finds the repository's).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if f, err := os.Open(filepath.Join(dir, "go.mod")); err == nil {
			sc := bufio.NewScanner(f)
			first := ""
			if sc.Scan() {
				first = strings.TrimSpace(sc.Text())
			}
			f.Close()
			if first == "module "+Module {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			wd, _ := os.Getwd()
			return "", fmt.Errorf("proctest: no go.mod of module %s in %s or above", Module, wd)
		}
		dir = parent
	}
}
