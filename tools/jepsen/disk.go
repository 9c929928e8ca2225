package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// dataDirSize is each node's data dir's tmpfs: ample for the Raft log (a
// 16 MiB raft-wal segment, preallocated; the log is compacted to 20
// trailing entries) and two snapshots.
const dataDirSize = "128m"

// mountDataDirs puts each node's data dir on a tmpfs of its own, so that
// the disk family can fill one node's disk, and only that one.
func (d *db) mountDataDirs() error {
	for _, n := range d.nodes {
		if err := os.MkdirAll(n.Dir, 0o755); err != nil {
			return err
		}
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+dataDirSize, "tmpfs", n.Dir).CombinedOutput(); err != nil {
			d.unmountDataDirs()
			return fmt.Errorf("mount a tmpfs on %s: %v: %s", n.Dir, err, strings.TrimSpace(string(out)))
		}
		d.mounts = append(d.mounts, n.Dir)
	}
	return nil
}

// unmountDataDirs undoes mountDataDirs (lazily: a process killed a moment
// ago may still hold a file). Safe to call any time.
func (d *db) unmountDataDirs() {
	for _, dir := range d.mounts {
		exec.Command("umount", "-l", dir).Run()
	}
	d.mounts = nil
}

// ballast is the file that fills a node's disk.
func ballast(n *node) string { return filepath.Join(n.Dir, "jepsen-ballast") }

// fillDisk allocates every free byte of node n's data dir's filesystem to
// the ballast, in 1 MiB steps and then 4 KiB ones, and reports whether
// the filesystem is full.
func fillDisk(n *node) (bool, error) {
	f, err := os.OpenFile(ballast(n), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return false, fmt.Errorf("fill %s's disk: %w", n.Name, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	off := fi.Size()
	for _, step := range []int64{1 << 20, 4 << 10} {
		for {
			err := syscall.Fallocate(int(f.Fd()), 0, off, step)
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			if err != nil {
				return false, fmt.Errorf("fill %s's disk: %w", n.Name, err)
			}
			off += step
		}
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(n.Dir, &st); err != nil {
		return false, err
	}
	return st.Bavail == 0, nil
}

// freeDisk gives node n's disk back.
func freeDisk(n *node) error { return os.Remove(ballast(n)) }

// diskFull fills a follower's disk (or the leader's: diskFullLeader) to
// the last byte, four times, each time for 1.5 s during which the server
// stalls again and again (stopped
// 200 ms, running 10 ms, as on a stalling disk) while a burst of writes goes
// through the leader, then frees it. Stalled almost all the time, with
// writes coming in, the follower finds the leader's pipeline to it full
// whenever it runs (two AppendEntries in flight, the sender waiting), so
// its first failed append most likely answers one of those; when its log
// store fails to append, it answers Success=false in the leader's own term
// on a connection that stays open, and hashicorp/raft v1.7.3 can then wedge
// that pipeline (its issue 612, found after disk stalls): the follower
// hears heartbeats and never another entry. Not every failure gets there
// (the sender may see the decoder gone first, about half the time), and a
// fill gives it about one try (replication only comes back to the pipeline
// once an append succeeds), so a fault fills four times.
// The other families do not get there at all: a timeout or a dead peer
// closes the connection, and pre-vote keeps a live leader from hearing a
// newer term.
func (nm *nemesis) diskFullFollower(ctx context.Context) fault {
	return nm.diskFull(ctx, "disk-full-follower", false)
}

// diskFullLeader fills the leader's disk: its log appends fail (it steps
// down, its store reopens once there is room), and so do the snapshots it
// takes meanwhile (every 100-300 entries).
func (nm *nemesis) diskFullLeader(ctx context.Context) fault {
	return nm.diskFull(ctx, "disk-full-leader", true)
}

func (nm *nemesis) diskFull(ctx context.Context, name string, leader bool) fault {
	f, l, term, ok := nm.withLeader(ctx, name)
	if !ok {
		return f
	}
	i := nm.otherThan(l)
	if leader {
		i = l
	}
	n := nm.db.nodes[i]
	fulls, stalls, writes := 0, 0, 0
	var errs []string
	for k := 0; k < 4 && ctx.Err() == nil; k++ {
		full, err := fillDisk(n)
		if err != nil {
			errs = append(errs, err.Error())
		}
		if full {
			fulls++
		}
		done := make(chan int, 1)
		go func() { done <- nm.load(ctx, l, 1500*time.Millisecond) }()
		for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end) && ctx.Err() == nil; stalls++ {
			if err := nm.db.pause(i); err != nil {
				errs = append(errs, err.Error())
				break
			}
			time.Sleep(200 * time.Millisecond)
			nm.db.resume(i)
			time.Sleep(10 * time.Millisecond)
		}
		writes += <-done
		if err := freeDisk(n); err != nil {
			errs = append(errs, err.Error())
		}
		nm.sleep(ctx, time.Duration(1000+nm.rng.Intn(500))*time.Millisecond)
	}
	f.Effect = fulls > 0 && stalls > 0
	f.Detail = fmt.Sprintf("%s's disk full %d times for 1.5s, stalled 200ms of every 210ms meanwhile (%d stalls), with %d burst writes through %s, the leader in term %d",
		n.Name, fulls, stalls, writes, nm.db.nodes[l].Name, term)
	if len(errs) > 0 {
		f.Detail += "; " + strings.Join(errs, "; ")
	}
	nm.recoverAll(ctx)
	return f
}
