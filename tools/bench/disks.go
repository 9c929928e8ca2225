package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/plugreg/plugreg/tests/framework/lazyfs"
)

// memberDisks gives each member of every system a disk of its own
// (-member-disk-sync): a lazyfs mount (FUSE, its data in memory) whose
// every fsync takes a fixed time, as a server with a local disk whose
// cache flush takes that long. On this machine all members otherwise share
// one virtual disk, where two fsyncs at once do not end sooner than one
// after the other: a leader that syncs its log while a follower syncs
// (third_party/raft's parallel leader write, etcd's) cannot show its gain.
// Both systems get the same disks; the FUSE server runs in the bench's
// process, so its CPU counts as the generator's.
type memberDisks struct {
	sync   time.Duration
	mounts []*lazyfs.Mount
}

// memberDiskCapacity bounds a member's data: only the pages written take
// memory, and a full run's log, snapshots and bolt file stay well under it.
const memberDiskCapacity = 8 << 30

// mount makes dir a fresh disk of its own; a nil memberDisks leaves dir
// on the bench's disk.
func (d *memberDisks) mount(dir string) error {
	if d == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("member disk: %w", err)
	}
	// Journal names: an fsync of any file makes earlier creates and
	// renames durable, as ext4 does; only the fsync's delay matters here.
	m, err := lazyfs.New(dir, lazyfs.Config{Capacity: memberDiskCapacity, Names: lazyfs.Journal})
	if err != nil {
		return fmt.Errorf("member disk %s: %w", filepath.Base(dir), err)
	}
	m.SlowSyncs(d.sync)
	d.mounts = append(d.mounts, m)
	return nil
}

// unmountAll unmounts every disk; the processes using them must have
// stopped.
func (d *memberDisks) unmountAll() error {
	if d == nil {
		return nil
	}
	var errs []error
	for _, m := range d.mounts {
		errs = append(errs, m.Unmount())
	}
	d.mounts = nil
	return errors.Join(errs...)
}
