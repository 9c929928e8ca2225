// Package lazymount mounts a lazyfs (tests/framework/lazyfs) for a test: a
// filesystem that keeps only what was synced across a simulated power
// cut, so a test can show that a file plugreg wrote survives one.
package lazymount

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/plugreg/plugreg/tests/framework/lazyfs"
)

// New mounts a lazyfs with POSIX names (a name is durable once its
// directory is synced, and only then) on a dir of the test's and
// unmounts it when the test ends; it skips the test where FUSE cannot be
// mounted directly (no /dev/fuse, not root).
func New(t testing.TB) *lazyfs.Mount {
	t.Helper()
	return Sized(t, 64<<20)
}

// Sized is New with room for capacity bytes of file data: writes past it
// fail with ENOSPC, as on a full disk.
func Sized(t testing.TB, capacity int64) *lazyfs.Mount {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no /dev/fuse: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("mounting FUSE directly needs root")
	}
	dir := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	m, err := lazyfs.New(dir, lazyfs.Config{Capacity: capacity, Names: lazyfs.POSIX})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Unmount(); err != nil {
			t.Error(err)
		}
	})
	return m
}
