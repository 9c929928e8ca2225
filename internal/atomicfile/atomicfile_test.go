package atomicfile_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/plugreg/plugreg/internal/atomicfile"
)

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	for _, body := range []string{"first", "second, longer than the first"} {
		if err := atomicfile.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil || string(b) != body {
			t.Fatalf("read back %q, %v; want %q", b, err, body)
		}
		if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
			t.Fatalf("mode %v", fi.Mode())
		}
	}
	// A failed replace (the target is a non-empty directory) keeps no
	// temporary file.
	target := filepath.Join(dir, "adir")
	os.MkdirAll(filepath.Join(target, "x"), 0o700)
	if err := atomicfile.WriteFile(target, []byte("x"), 0o600); err == nil {
		t.Fatal("replaced a directory")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Fatalf("left behind: %v", entries)
	}
}
