package lazyfs

import (
	"errors"
	"fmt"
	"maps"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Mount is a lazyfs filesystem mounted on a directory.
type Mount struct {
	Dir string

	fs   *fileSystem
	srv  *fuse.Server
	dev  uint64        // the mount's device number: its /sys/fs/fuse/connections entry
	done chan struct{} // closed when the serving goroutine (owned by the Mount) ends

	cutMu sync.Mutex // one cut at a time
	once  sync.Once  // Unmount
	err   error      // Unmount's
}

// Config configures a mount.
type Config struct {
	// Capacity is the bytes the files may take (whole 4 KiB pages of
	// their sizes, holes included) before writes that grow a file fail
	// with ENOSPC. Zero: 4 GiB. The data lives in memory, but only the
	// pages written take memory.
	Capacity int64
	// Names says when names (creates, renames, unlinks) become durable.
	// Zero: POSIX.
	Names Names
}

// Names is when names become durable.
type Names int

const (
	// POSIX: a name is durable once its directory is fsynced, and only
	// then: the strictest reading, ALICE's.
	POSIX Names = iota
	// Journal: every fsync, of any file or directory, makes every name
	// change made before it durable, as ext4's and XFS's metadata
	// journals do (one ordered journal, committed whole by any fsync).
	// File data still needs that file's own fsync.
	Journal
)

func (n Names) String() string {
	switch n {
	case POSIX:
		return "posix"
	case Journal:
		return "journal"
	}
	return fmt.Sprintf("Names(%d)", int(n))
}

// New mounts an empty lazyfs on dir, which must exist, directly with
// mount(2) (no fusermount): the caller must be root. Unmount it always.
func New(dir string, cfg Config) (*Mount, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("lazyfs: %w", err)
	}
	if cfg.Capacity == 0 {
		cfg.Capacity = 4 << 30
	}
	if cfg.Capacity < pageSize {
		return nil, fmt.Errorf("lazyfs: capacity %d: %w", cfg.Capacity, ErrCapacity)
	}
	if cfg.Names != POSIX && cfg.Names != Journal {
		return nil, fmt.Errorf("lazyfs: %v: %w", cfg.Names, ErrNames)
	}
	fs := newFileSystem(cfg)
	opts := &fuse.MountOptions{
		FsName:            "lazyfs",
		Name:              "lazyfs",
		DirectMountStrict: true,
		// The kernel keeps no xattr and no lock state of ours to lose:
		// xattrs are refused, and flock and POSIX locks stay in the kernel
		// (bbolt's flock works as on any local filesystem).
		DisableXAttrs:      true,
		DisableReadDirPlus: true,
	}
	srv, err := fuse.NewServer(fs, dir, opts)
	if err != nil {
		return nil, fmt.Errorf("lazyfs: mount %s: %w", dir, err)
	}
	m := &Mount{Dir: dir, fs: fs, srv: srv, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		srv.Serve()
	}()
	if err := srv.WaitMount(); err != nil {
		m.Unmount()
		return nil, fmt.Errorf("lazyfs: mount %s: %w", dir, err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		m.Unmount()
		return nil, fmt.Errorf("lazyfs: mount %s: %w", dir, err)
	}
	m.dev = st.Dev
	return m, nil
}

// CutStats says what a cut discarded.
type CutStats struct {
	DirtyPages int // file pages written and not fsynced
	Files      int // files whose data or size was not all durable
	Dirs       int // directories whose entries were not durable
	Inodes     int // files and directories gone: named before, not after
	// What reached the disk of the unsynced pages (CutKeeping): pages
	// kept whole, pages torn (part of their sectors new), and the files
	// left with some of their unsynced pages but not all, by name.
	KeptPages, TornPages int
	Partial              []string
}

func (s CutStats) String() string {
	out := fmt.Sprintf("%d unsynced pages in %d files, %d dirs with unsynced entries, %d files or dirs gone", s.DirtyPages, s.Files, s.Dirs, s.Inodes)
	if s.KeptPages+s.TornPages > 0 {
		out += fmt.Sprintf("; of the unsynced pages %d reached the disk whole and %d torn, leaving %d files partly written (%s)",
			s.KeptPages, s.TornPages, len(s.Partial), strings.Join(s.Partial, ", "))
	}
	return out
}

// Keep is what a power cut lets reach the disk of the pages written since
// their file's last fsync. Disks write back in their own order and a
// sector at a time (LazyFS, by dsrhaslab, whose faults Jepsen and etcd
// use, models the same): a cut may leave any subset of those pages, a
// prefix of them (a writeback, or an fsync, cut short), and a page with
// only its first sectors new.
type Keep struct {
	Mode KeepMode
	// Tear: one of the pages kept in each file is torn (with a prefix,
	// the last): its first 1-7 sectors of 512 bytes are new, the rest as
	// before.
	Tear bool
}

// KeepMode picks which unsynced pages of a file reach the disk.
type KeepMode int

const (
	KeepNone   KeepMode = iota // none: all or nothing, what Cut does
	KeepSubset                 // each page with probability 1/2
	KeepPrefix                 // the pages in file order up to a random point
)

func (k Keep) String() string {
	s := [...]string{"none", "subset", "prefix"}[k.Mode]
	if k.Tear && k.Mode != KeepNone {
		s += "+torn"
	}
	return s
}

// Cut is a power cut. From its first instant every request fails with EIO
// and nothing more is applied; kill (which may be nil) is called then, to
// SIGKILL the processes using the mount and wait until they are gone
// (their dying closes are answered, with EIO); then every file and
// directory is put back to its durable view, files and names never made
// durable are gone, and handles opened before the cut fail with EIO
// forever. The kernel's cached pages and attributes are invalidated
// before Cut returns.
func (m *Mount) Cut(kill func()) CutStats { return m.CutKeeping(kill, Keep{}, nil) }

// CutKeeping is Cut, with what keep lets of the unsynced pages reach the
// disk first (rng picks them; nil with KeepNone). Names still become
// durable only as Config.Names says.
func (m *Mount) CutKeeping(kill func(), keep Keep, rng *rand.Rand) CutStats {
	m.cutMu.Lock()
	defer m.cutMu.Unlock()
	fs := m.fs
	fs.mu.Lock()
	fs.frozen = true
	stats := fs.unsyncedLocked()
	fs.mu.Unlock()

	if kill != nil {
		kill()
	}

	fs.mu.Lock()
	var named []*inode
	for _, n := range fs.inodes {
		if n.links > 0 {
			named = append(named, n)
		}
	}
	if keep.Mode != KeepNone {
		// In inode order, so that one seed picks the same pages.
		for _, ino := range slices.Sorted(maps.Keys(fs.inodes)) {
			n := fs.inodes[ino]
			kept, torn, partial := n.keep(keep, rng)
			stats.KeptPages += kept
			stats.TornPages += torn
			if partial {
				stats.Partial = append(stats.Partial, n.name)
			}
		}
	}
	fs.restoreLocked()
	for _, n := range named {
		if fs.inodes[n.ino] == nil {
			stats.Inodes++
		}
	}
	fs.frozen = false
	fs.cuts++
	inos := make([]uint64, 0, len(fs.inodes))
	for ino := range fs.inodes {
		inos = append(inos, ino)
	}
	fs.mu.Unlock()
	// Outside fs.mu: invalidating pages can wait on reads the kernel
	// sent us. ENOENT (an inode the kernel does not hold) is fine.
	for _, ino := range inos {
		m.srv.InodeNotify(ino, 0, 0)
	}
	return stats
}

// FailSync makes the next fsync of a file whose name ends with suffix
// fail with EIO, as a disk's failed writeback does on Linux: the file's
// dirty pages are marked clean without reaching the disk, reads go on
// returning them until a cut, and no later fsync writes them (the
// PostgreSQL "fsyncgate"). The channel receives the failure when it
// happened; a cut or Unmount leaves a pending one armed.
func (m *Mount) FailSync(suffix string) <-chan SyncFailure {
	m.fs.mu.Lock()
	defer m.fs.mu.Unlock()
	f := &syncFailure{suffix: suffix, done: make(chan SyncFailure, 1)}
	m.fs.failSyncs = append(m.fs.failSyncs, f)
	return f.done
}

// FreezeAtSync makes the power fail inside the next fsync of a file whose
// name ends with suffix: that fsync and every request after it fail with
// EIO, and nothing more reaches the disk, until a cut (CutKeeping, which
// says what the disk kept of the pages that fsync was writing) makes the
// durable view current. The channel receives the file's name when it
// happened; Unmount leaves a pending one armed.
func (m *Mount) FreezeAtSync(suffix string) <-chan SyncFailure {
	m.fs.mu.Lock()
	defer m.fs.mu.Unlock()
	f := &syncFailure{suffix: suffix, freeze: true, done: make(chan SyncFailure, 1)}
	m.fs.failSyncs = append(m.fs.failSyncs, f)
	return f.done
}

// SlowSyncs makes every fsync from now on wait d before it syncs (zero:
// none), as a disk whose cache flushes take seconds; reads and writes go
// on meanwhile. It returns how many fsyncs were delayed so far.
func (m *Mount) SlowSyncs(d time.Duration) int64 {
	m.fs.syncDelay.Store(int64(d))
	return m.fs.slowed.Load()
}

// DisarmSyncs drops the fsync failures FailSync armed that have not
// happened yet, and says how many.
func (m *Mount) DisarmSyncs() int {
	m.fs.mu.Lock()
	defer m.fs.mu.Unlock()
	n := len(m.fs.failSyncs)
	m.fs.failSyncs = nil
	return n
}

// unsyncedLocked counts what a cut now would discard.
func (fs *fileSystem) unsyncedLocked() CutStats {
	var s CutStats
	for _, n := range fs.inodes {
		pages, entries := n.unsynced()
		s.DirtyPages += pages
		switch {
		case n.isDir() && entries:
			s.Dirs++
		case !n.isDir() && (pages > 0 || entries):
			s.Files++
		}
	}
	return s
}

// restoreLocked makes the durable tree current: from the root down, every
// directory's durable entries, every file's durable data. What no durable
// entry reaches is forgotten. A directory durably named twice (renamed,
// and both directories fsynced, the old one before the rename) keeps its
// first name in sorted order, as fsck would keep one.
func (fs *fileSystem) restoreLocked() {
	root := fs.inodes[fuse.FUSE_ROOT_ID]
	root.restore()
	keep := map[uint64]*inode{root.ino: root}
	queue := []*inode{root}
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		for _, name := range d.sortedNames() {
			c := d.cur.entries[name]
			if keep[c.ino] != nil {
				if c.isDir() {
					delete(d.cur.entries, name)
					continue
				}
				c.links++ // a file durably named twice: a hard link now
				continue
			}
			c.restore()
			c.links = 1
			keep[c.ino] = c
			if c.isDir() {
				c.parent = d
				queue = append(queue, c)
			}
		}
	}
	for _, n := range keep {
		if n.isDir() {
			n.syncDir() // the dropped duplicate names go from the durable view too
		}
	}
	fs.inodes = keep
	clear(fs.handles)
}

// Unmount unmounts the filesystem and waits for its serving goroutine. A
// mount still in use (a process holds a file) is detached and its FUSE
// connection aborted, so that it never outlives the caller. Safe to call
// more than once.
func (m *Mount) Unmount() error {
	m.once.Do(func() {
		if err := m.srv.Unmount(); err != nil {
			// Busy: detach it, and abort the connection so that the
			// processes still in it get ENOTCONN and Serve ends.
			derr := syscall.Unmount(m.Dir, syscall.MNT_DETACH)
			aerr := m.abort()
			if derr != nil || aerr != nil {
				m.err = fmt.Errorf("lazyfs: unmount %s: %w (detach: %v, abort: %v)", m.Dir, err, derr, aerr)
			}
		}
		select {
		case <-m.done:
		case <-time.After(10 * time.Second):
			m.err = errors.Join(m.err, fmt.Errorf("lazyfs: unmount %s: %w", m.Dir, ErrServing))
		}
	})
	return m.err
}

// abort aborts the mount's FUSE connection through the fusectl
// filesystem, mounting it first if needed.
func (m *Mount) abort() error {
	if m.dev == 0 {
		return nil // never fully mounted: the device number is unknown
	}
	const ctl = "/sys/fs/fuse/connections"
	path := filepath.Join(ctl, strconv.FormatUint(uint64(unix.Minor(m.dev)), 10), "abort")
	if _, err := os.Stat(path); err != nil {
		if merr := syscall.Mount("fusectl", ctl, "fusectl", 0, ""); merr != nil && !errors.Is(merr, syscall.EBUSY) {
			return fmt.Errorf("mount fusectl: %w", merr)
		}
	}
	return os.WriteFile(path, []byte("1"), 0o200)
}
