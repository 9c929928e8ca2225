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
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil && pid > 0 {
				holder = fmt.Sprintf(" (pid %d)", pid)
			}
		}
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("data dir %s is in use by another agent%s: one data dir serves one agent", dir, holder)
		}
		return nil, fmt.Errorf("lock data dir %s: %w", dir, err)
	}
	// The pid only names the holder in the message above; the lock, not
	// the file's contents, decides, so it need not be synced.
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
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
