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

// dataDirSize is each node's data dir's tmpfs: ample for raft.db (the log
// is compacted to 20 trailing entries) and two snapshots.
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

// diskFull stalls a follower and fills its disk, three times, while the
// writes go on: SIGSTOP for 200-300 ms (as a stalled disk would), during
// which the leader's pipeline to it fills (two AppendEntries in flight, the
// sender waiting), its disk filled to the last byte meanwhile; SIGCONT, 1-2 s
// of the full disk, then the disk freed. Back, the follower fails to append
// and answers Success=false in the leader's own term on a connection that
// stays open, and the pipeline is full: hashicorp/raft v1.7.3 then wedges
// that pipeline with even odds (its issue 612, found after disk stalls);
// the follower hears heartbeats and never another entry. The other
// families do not get there: a timeout or a dead peer closes the
// connection, and pre-vote keeps a live leader from hearing a newer term.
func (nm *nemesis) diskFull(ctx context.Context) fault {
	l, term := nm.db.leader(ctx)
	f := fault{Name: "disk-full-follower"}
	if l < 0 {
		f.Detail = "no leader"
		return f
	}
	i := nm.otherThan(l)
	n := nm.db.nodes[i]
	fulls := 0
	var errs []string
	for k := 0; k < 3 && ctx.Err() == nil; k++ {
		if err := nm.db.pause(i); err != nil {
			errs = append(errs, err.Error())
		}
		nm.sleep(ctx, time.Duration(200+nm.rng.Intn(100))*time.Millisecond)
		full, err := fillDisk(n)
		if err != nil {
			errs = append(errs, err.Error())
		}
		if full {
			fulls++
		}
		nm.db.resume(i)
		nm.sleep(ctx, time.Duration(1000+nm.rng.Intn(1000))*time.Millisecond)
		if err := freeDisk(n); err != nil {
			errs = append(errs, err.Error())
		}
		nm.sleep(ctx, time.Duration(500+nm.rng.Intn(1000))*time.Millisecond)
	}
	f.Effect = fulls > 0
	f.Detail = fmt.Sprintf("%s stalled 200-300ms and its disk full for 1-2s, %d times, while %s led in term %d", n.Name, fulls, nm.db.nodes[l].Name, term)
	if len(errs) > 0 {
		f.Detail += "; " + strings.Join(errs, "; ")
	}
	nm.recoverAll(ctx)
	return f
}
