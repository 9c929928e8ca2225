package datadir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// LockName is the file in a data dir whose lock an agent holds while it
// runs.
const LockName = "agent.lock"

// Lock is a data dir held by one agent process. Two agents on one data
// dir would write one Raft log: raft-wal's segments would interleave, and
// bbolt (raft.db, wal-meta.db) makes the second wait on its file lock
// forever, without a word. The lock refuses the second at once instead.
type Lock struct{ f *os.File }

// Hold takes dir's lock, or fails at once naming the process that holds
// it. The kernel releases the lock when the process ends, however it
// ends, so a crash leaves nothing to clean up.
func Hold(dir string) (*Lock, error) {
	path := filepath.Join(dir, LockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, FileMode)
	if err != nil {
		return nil, fmt.Errorf("lock data dir: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder := ""
		if b, rerr := os.ReadFile(path); rerr == nil {
			holder = holderOf(string(b))
		}
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("data dir %s is in use by another agent%s: one data dir serves one agent", dir, holder)
		}
		return nil, fmt.Errorf("lock data dir %s: %w", dir, err)
	}
	// The pid and host only name the holder in the message above; the
	// lock, not the file's contents, decides, so it need not be synced.
	// The host: two agents in two containers (two pods on one host
	// sharing a hostPath) are both pid 1, and only the host (a pod's
	// name) tells them apart.
	if err := f.Truncate(0); err == nil {
		host, _ := os.Hostname()
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"+host+"\n"), 0)
	}
	return &Lock{f: f}, nil
}

// Release lets another agent have the data dir. Call it only once
// nothing of this agent writes there any more.
func (l *Lock) Release() error {
	if l == nil {
		return nil
	}
	return l.f.Close() // closing the file releases its flock
}

// holderOf names the holder a lock file's contents record: its pid and,
// when recorded, its host; "" when they say nothing usable.
func holderOf(contents string) string {
	lines := strings.Split(strings.TrimSpace(contents), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(lines[0]))
	if err != nil || pid <= 0 {
		return ""
	}
	if len(lines) > 1 && strings.TrimSpace(lines[1]) != "" {
		return fmt.Sprintf(" (pid %d on host %s)", pid, strings.TrimSpace(lines[1]))
	}
	return fmt.Sprintf(" (pid %d)", pid)
}
