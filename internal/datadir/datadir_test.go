package datadir_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/plugreg/plugreg/internal/atomicfile"
	"github.com/plugreg/plugreg/internal/datadir"
	"github.com/plugreg/plugreg/tests/framework/lazymount"
)

// A data dir made at first start, with a file synced in it, is still
// there after a power cut: its parents' entries were synced too.
func TestCreatedDataDirSurvivesAPowerCut(t *testing.T) {
	for _, depth := range []string{"data", "a/b/data"} {
		t.Run(depth, func(t *testing.T) {
			m := lazymount.New(t)
			dir := filepath.Join(m.Dir, depth)
			if err := datadir.Create(dir); err != nil {
				t.Fatal(err)
			}
			if err := atomicfile.WriteFile(filepath.Join(dir, "node-id"), []byte("n1\n"), datadir.FileMode); err != nil {
				t.Fatal(err)
			}
			m.Cut(nil)
			b, err := os.ReadFile(filepath.Join(dir, "node-id"))
			if err != nil || string(b) != "n1\n" {
				t.Fatalf("after a power cut: %q, %v", b, err)
			}
		})
	}
}

func TestMkdirAllOfAnExistingDir(t *testing.T) {
	dir := t.TempDir()
	if err := datadir.MkdirAll(dir, datadir.DirMode); err != nil {
		t.Fatal(err)
	}
	if err := datadir.MkdirAll(filepath.Join(dir, "f", "x"), datadir.DirMode); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "file"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := datadir.MkdirAll(filepath.Join(dir, "file", "x"), datadir.DirMode); err == nil {
		t.Fatal("a dir under a file was made")
	}
}

// A second holder of a data dir is refused at once, naming the first's
// process; once the first releases it, the dir can be held again.
func TestHoldRefusesASecondHolder(t *testing.T) {
	dir := t.TempDir()
	first, err := datadir.Hold(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = datadir.Hold(dir)
	if err == nil {
		t.Fatal("a data dir held twice")
	}
	host, _ := os.Hostname()
	for _, want := range []string{dir, "in use by another agent", "pid " + strconv.Itoa(os.Getpid()) + " on host " + host} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q: %v", want, err)
		}
	}
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	second, err := datadir.Hold(dir)
	if err != nil {
		t.Fatalf("held again after its release: %v", err)
	}
	second.Release()
}
