package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A member's disk delays each fsync by its sync time and nothing else; a
// nil memberDisks leaves the dir as it is.
func TestMemberDisksDelayFsyncs(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no /dev/fuse: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("mounting FUSE directly needs root")
	}
	var none *memberDisks
	if err := none.mount(filepath.Join(t.TempDir(), "plain")); err != nil {
		t.Fatalf("nil disks: %v", err)
	}
	const delay = 100 * time.Millisecond
	d := &memberDisks{sync: delay}
	dir := filepath.Join(t.TempDir(), "plugreg-n1")
	if err := d.mount(dir); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := d.unmountAll(); err != nil {
			t.Error(err)
		}
	}()
	f, err := os.Create(filepath.Join(dir, "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("entry")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < delay {
		t.Fatalf("fsync took %v on a disk whose fsyncs take %v", took, delay)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
