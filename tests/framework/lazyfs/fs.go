package lazyfs

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// fileSystem is the FUSE filesystem: every request takes mu, so a cut
// (which takes it too) falls between two requests, never inside one.
type fileSystem struct {
	fuse.RawFileSystem // ENOSYS for what is not implemented: symlinks, links, xattrs, locks (the kernel keeps those locally)

	mu      sync.Mutex // guards everything below
	inodes  map[uint64]*inode
	handles map[uint64]*handle
	nextIno uint64
	nextFh  uint64
	// frozen is set from the instant of a cut until the durable views
	// are current again: every request in between fails with EIO, the
	// dying process's included (its closes send FLUSH, which must be
	// answered for it to exit).
	frozen bool
	cuts   int // completed cuts: a handle opened before one is stale
	// failSyncs are armed fsync failures (FailSync), by name suffix.
	failSyncs []*syncFailure
	// syncDelay is how long each fsync waits before it syncs (SlowSyncs),
	// without holding mu; slowed counts the fsyncs it delayed.
	syncDelay atomic.Int64
	slowed    atomic.Int64
	capacity  int64 // bytes the files may take (Config.Capacity)
	journal   bool  // Config.Names == Journal
}

// handle is an open file or directory.
type handle struct {
	n     *inode
	names []string // directories: the entries when opened (readdir pages through them by index)
	inos  []uint64
	modes []uint32
}

func newFileSystem(cfg Config) *fileSystem {
	now := time.Now()
	root := newInode(fuse.FUSE_ROOT_ID, attrs{mode: syscall.S_IFDIR | 0o755, atime: now, mtime: now, ctime: now})
	root.parent = root
	return &fileSystem{
		RawFileSystem: fuse.NewDefaultRawFileSystem(),
		inodes:        map[uint64]*inode{root.ino: root},
		handles:       map[uint64]*handle{},
		nextIno:       fuse.FUSE_ROOT_ID + 1,
		nextFh:        1,
		capacity:      cfg.Capacity,
		journal:       cfg.Names == Journal,
	}
}

func (fs *fileSystem) String() string { return "lazyfs" }

// enter locks fs for a request and says whether it may proceed.
func (fs *fileSystem) enter() fuse.Status {
	fs.mu.Lock()
	if fs.frozen {
		return fuse.EIO
	}
	return fuse.OK
}

func (fs *fileSystem) node(id uint64) (*inode, fuse.Status) {
	n := fs.inodes[id]
	if n == nil {
		// Gone: unreachable after a cut, or forgotten.
		return nil, fuse.Status(syscall.ESTALE)
	}
	return n, fuse.OK
}

func (fs *fileSystem) handle(fh uint64) (*handle, fuse.Status) {
	h := fs.handles[fh]
	if h == nil {
		// Opened before a cut: the power went, the open file with it.
		return nil, fuse.EIO
	}
	return h, fuse.OK
}

// dropIfUnused forgets n once nothing can reach it: no name in either
// view, no kernel reference, no open handle.
func (fs *fileSystem) dropIfUnused(n *inode) {
	if n.ino != fuse.FUSE_ROOT_ID && n.links == 0 && n.durLinks == 0 && n.lookups == 0 && n.opens == 0 {
		delete(fs.inodes, n.ino)
	}
}

func timeParts(t time.Time) (uint64, uint32) { return uint64(t.Unix()), uint32(t.Nanosecond()) }

func (n *inode) fill(a *fuse.Attr) {
	a.Ino = n.ino
	a.Mode = n.cur.mode
	a.Uid, a.Gid = n.cur.uid, n.cur.gid
	a.Blksize = pageSize
	if n.isDir() {
		a.Nlink = 2
		a.Size = pageSize
	} else {
		a.Nlink = uint32(n.links)
		a.Size = uint64(n.cur.size)
		a.Blocks = uint64(len(n.cur.pages)) * (pageSize / 512)
	}
	a.Atime, a.Atimensec = timeParts(n.cur.atime)
	a.Mtime, a.Mtimensec = timeParts(n.cur.mtime)
	a.Ctime, a.Ctimensec = timeParts(n.cur.ctime)
}

// entry replies with n, for the kernel to cache for no time at all: after
// a cut a name may name another inode, or none, and the kernel must ask
// again rather than believe its cache.
func (fs *fileSystem) entry(n *inode, out *fuse.EntryOut) {
	n.lookups++
	out.NodeId = n.ino
	out.Generation = 0
	out.EntryValid, out.EntryValidNsec, out.AttrValid, out.AttrValidNsec = 0, 0, 0, 0
	n.fill(&out.Attr)
}

func (fs *fileSystem) Lookup(_ <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	st := fs.enter()
	defer fs.mu.Unlock()
	if !st.Ok() {
		return st
	}
	dir, st := fs.node(h.NodeId)
	if !st.Ok() {
		return st
	}
	c := dir.cur.entries[name]
	if c == nil {
		return fuse.ENOENT
	}
	fs.entry(c, out)
	return fuse.OK
}

func (fs *fileSystem) Forget(nodeid, nlookup uint64) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n := fs.inodes[nodeid]
	if n == nil {
		return // dropped by a cut; the kernel is only catching up
	}
	n.lookups -= min(n.lookups, nlookup)
	fs.dropIfUnused(n)
}

func (fs *fileSystem) GetAttr(_ <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	st := fs.enter()
	defer fs.mu.Unlock()
	if !st.Ok() {
		return st
	}
	n, st := fs.node(in.NodeId)
	if !st.Ok() {
		return st
	}
	n.fill(&out.Attr)
	return fuse.OK
}

func (fs *fileSystem) SetAttr(_ <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	st := fs.enter()
	defer fs.mu.Unlock()
	if !st.Ok() {
		return st
	}
	n, st := fs.node(in.NodeId)
	if !st.Ok() {
		return st
	}
	if fh, ok := in.GetFh(); ok {
		if _, st := fs.handle(fh); !st.Ok() {
			return st
		}
	}
	now := time.Now()
	if in.Valid&fuse.FATTR_MODE != 0 {
		n.cur.mode = n.cur.mode&syscall.S_IFMT | in.Mode&0o7777
	}
	if in.Valid&fuse.FATTR_UID != 0 {
		n.cur.uid = in.Uid
	}
	if in.Valid&fuse.FATTR_GID != 0 {
		n.cur.gid = in.Gid
	}
	if in.Valid&fuse.FATTR_SIZE != 0 {
		if n.isDir() {
			return fuse.Status(syscall.EISDIR)
		}
		n.truncate(int64(in.Size))
		n.cur.mtime = now
	}
	if in.Valid&fuse.FATTR_ATIME != 0 {
		n.cur.atime = time.Unix(int64(in.Atime), int64(in.Atimensec))
		if in.Valid&fuse.FATTR_ATIME_NOW != 0 {
			n.cur.atime = now
		}
	}
	if in.Valid&fuse.FATTR_MTIME != 0 {
		n.cur.mtime = time.Unix(int64(in.Mtime), int64(in.Mtimensec))
		if in.Valid&fuse.FATTR_MTIME_NOW != 0 {
			n.cur.mtime = now
		}
	}
	n.cur.ctime = now
	n.fill(&out.Attr)
	return fuse.OK
}

// newChild makes an inode named name in dir, in the current view only.
func (fs *fileSystem) newChild(dir *inode, name string, mode uint32, c fuse.Caller) *inode {
	now := time.Now()
	n := newInode(fs.nextIno, attrs{mode: mode, uid: c.Uid, gid: c.Gid, atime: now, mtime: now, ctime: now})
	fs.nextIno++
	fs.inodes[n.ino] = n
	if n.isDir() {
		n.parent = dir
	}
	dir.cur.entries[name] = n
	dir.cur.mtime, dir.cur.ctime = now, now
	n.links++
	n.name = name
	return n
}

func (fs *fileSystem) Mkdir(_ <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	st := fs.enter()
	defer fs.mu.Unlock()
	if !st.Ok() {
		return st
	}
	dir, st := fs.dir(in.NodeId)
	if !st.Ok() {
		return st
	}
	if dir.cur.entries[name] != nil {
		return fuse.Status(syscall.EEXIST)
	}
	fs.entry(fs.newChild(dir, name, syscall.S_IFDIR|in.Mode&0o7777, in.Caller), out)
	return fuse.OK
}

func (fs *fileSystem) Mknod(_ <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	st := fs.enter()
	defer fs.mu.Unlock()
	if !st.Ok() {
		return st
	}
	switch in.Mode & syscall.S_IFMT {
	case syscall.S_IFREG, syscall.S_IFSOCK, syscall.S_IFIFO:
		// Files, and the unix sockets agents bind in their data dir (the
		// kernel keeps the socket itself; the name is ours).
	default:
		return fuse.Status(syscall.EPERM) // no devices in a data dir
	}
	dir, st := fs.dir(in.NodeId)
	if !st.Ok() {
		return st
	}
	if dir.cur.entries[name] != nil {
		return fuse.Status(syscall.EEXIST)
	}
	fs.entry(fs.newChild(dir, name, in.Mode&(syscall.S_IFMT|0o7777), in.Caller), out)
	return fuse.OK
}

func (fs *fileSystem) dir(id uint64) (*inode, fuse.Status) {
	n, st := fs.node(id)
	if !st.Ok() {
		return nil, st
	}
	if !n.isDir() {
		return nil, fuse.ENOTDIR
	}
	return n, fuse.OK
}

func (fs *fileSystem) open(n *inode, out *fuse.OpenOut) {
	n.opens++
	fh := fs.nextFh
	fs.nextFh++
	fs.handles[fh] = &handle{n: n}
	out.Fh = fh
	// No FOPEN_KEEP_CACHE: each open drops the kernel's cached pages of
	// the file, so that a process that opens a file after a cut reads
	// the durable data, not pages cached before it.
	out.OpenFlags = 0
}

func (fs *fileSystem) Create(_ <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	st := fs.enter()
	defer fs.mu.Unlock()
	if !st.Ok() {
		return st
	}
	dir, st := fs.dir(in.NodeId)
	if !st.Ok() {
		return st
	}
	n := dir.cur.entries[name]
	switch {
	case n != nil && in.Flags&syscall.O_EXCL != 0:
		return fuse.Status(syscall.EEXIST)
	case n != nil && n.isDir():
		return fuse.Status(syscall.EISDIR)
	case n != nil:
		if in.Flags&syscall.O_TRUNC != 0 {
			n.truncate(0)
		}
	default:
		n = fs.newChild(dir, name, syscall.S_IFREG|in.Mode&0o7777, in.Caller)
	}
	fs.entry(n, &out.EntryOut)
	fs.open(n, &out.OpenOut)
	return fuse.OK
}

func (fs *fileSystem) Open(_ <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	st := fs.enter()
	defer fs.mu.Unlock()
	if !st.Ok() {
		return st
	}
	n, st := fs.node(in.NodeId)
	if !st.Ok() {
		return st
	}
	if n.isDir() {
		return fuse.Status(syscall.EISDIR)
	}
	// O_TRUNC never arrives here: without atomic_o_trunc the kernel
	// truncates with a SETATTR first.
	fs.open(n, out)
	return fuse.OK
}

func (fs *fileSystem) Read(_ <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	st := fs.enter()
	defer fs.mu.Unlock()
	if !st.Ok() {
		return nil, st
	}
	h, st := fs.handle(in.Fh)
	if !st.Ok() {
		return nil, st
	}
	n := h.n.read(int64(in.Offset), buf[:min(len(buf), int(in.Size))])
	return fuse.ReadResultData(buf[:n]), fuse.OK
}

func (fs *fileSystem) Write(_ <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	st := fs.enter()
	defer fs.mu.Unlock()
	if !st.Ok() {
		return 0, st
	}
	h, st := fs.handle(in.Fh)
	if !st.Ok() {
		return 0, st
	}
	if st := fs.reserve(h.n, int64(in.Offset)+int64(len(data))); !st.Ok() {
		return 0, st
	}
	h.n.write(int64(in.Offset), data)
	h.n.cur.mtime = time.Now()
	h.n.cur.ctime = h.n.cur.mtime
	return uint32(len(data)), fuse.OK
}

// Flush is close(2): no sync, as on ext4 (whose auto_da_alloc heuristics,
// which flush on some renames and truncates, are not modelled).
func (fs *fileSystem) Flush(_ <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	st := fs.enter()
	defer fs.mu.Unlock()
	if !st.Ok() {
		return st
	}
	_, st = fs.handle(in.Fh)
	return st
}

func (fs *fileSystem) release(fh uint64) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	h := fs.handles[fh]
	if h == nil {
		return // opened before a cut, which dropped it
	}
	delete(fs.handles, fh)
	h.n.opens--
	fs.dropIfUnused(h.n)
}

func (fs *fileSystem) Release(_ <-chan struct{}, in *fuse.ReleaseIn) { fs.release(in.Fh) }
func (fs *fileSystem) ReleaseDir(in *fuse.ReleaseIn)                 { fs.release(in.Fh) }

// Fsync makes the file's data and size durable (fdatasync) and, unless
// datasync, its attributes too. Never its name: that takes an fsync of
// its directory.
func (fs *fileSystem) Fsync(_ <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	fs.slowSync()
	st := fs.enter()
	defer fs.mu.Unlock()
	if !st.Ok() {
		return st
	}
	h, st := fs.handle(in.Fh)
	if !st.Ok() {
		return st
	}
	if fs.failSyncLocked(h.n) {
		return fuse.EIO
	}
	h.n.syncData()
	fs.commitNamesLocked()
	if in.FsyncFlags&1 == 0 { // FUSE_FSYNC_FDATASYNC
		h.n.dur.attrs = h.n.cur.attrs
	}
	return fuse.OK
}

// FsyncDir makes the directory's entries and attributes durable: names
// created, renamed in or out, or removed since its last fsync.
func (fs *fileSystem) FsyncDir(_ <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	fs.slowSync()
	st := fs.enter()
	defer fs.mu.Unlock()
	if !st.Ok() {
		return st
	}
	h, st := fs.handle(in.Fh)
	if !st.Ok() {
		return st
	}
	h.n.syncDir()
	fs.commitNamesLocked()
	h.n.dur.attrs = h.n.cur.attrs
	return fuse.OK
}

// commitNamesLocked is the metadata journal's commit that every fsync
// makes in Journal mode: every directory's entries become durable.
func (fs *fileSystem) commitNamesLocked() {
	if !fs.journal {
		return
	}
	for _, n := range fs.inodes {
		if n.isDir() {
			n.syncDir()
		}
	}
}

// fallocate modes (linux/falloc.h).
const (
	fallocKeepSize  = 0x01
	fallocPunchHole = 0x02
	fallocZeroRange = 0x10
)

func (fs *fileSystem) Fallocate(_ <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	st := fs.enter()
	defer fs.mu.Unlock()
	if !st.Ok() {
		return st
	}
	h, st := fs.handle(in.Fh)
	if !st.Ok() {
		return st
	}
	n := h.n
	off, end := int64(in.Offset), int64(in.Offset+in.Length)
	if in.Mode&fallocKeepSize == 0 {
		if st := fs.reserve(n, end); !st.Ok() {
			return st
		}
	}
	switch in.Mode &^ fallocKeepSize {
	case 0:
		// Allocation is all in memory: only the size changes, and the
		// new range reads as zeros (absent pages).
	case fallocPunchHole:
		if in.Mode&fallocKeepSize == 0 {
			return fuse.EINVAL
		}
		n.zero(off, end)
	case fallocZeroRange:
		n.zero(off, end)
	default:
		return fuse.Status(syscall.EOPNOTSUPP)
	}
	if in.Mode&fallocKeepSize == 0 && end > n.cur.size {
		n.cur.size = end
	}
	n.cur.ctime = time.Now()
	return fuse.OK
}

func (fs *fileSystem) Unlink(_ <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	return fs.remove(h, name, false)
}

func (fs *fileSystem) Rmdir(_ <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	return fs.remove(h, name, true)
}

func (fs *fileSystem) remove(h *fuse.InHeader, name string, wantDir bool) fuse.Status {
	st := fs.enter()
	defer fs.mu.Unlock()
	if !st.Ok() {
		return st
	}
	dir, st := fs.dir(h.NodeId)
	if !st.Ok() {
		return st
	}
	n := dir.cur.entries[name]
	switch {
	case n == nil:
		return fuse.ENOENT
	case wantDir && !n.isDir():
		return fuse.ENOTDIR
	case !wantDir && n.isDir():
		return fuse.Status(syscall.EISDIR)
	case wantDir && len(n.cur.entries) > 0:
		return fuse.Status(syscall.ENOTEMPTY)
	}
	fs.unlinkLocked(dir, name, n)
	return fuse.OK
}

func (fs *fileSystem) unlinkLocked(dir *inode, name string, n *inode) {
	delete(dir.cur.entries, name)
	now := time.Now()
	dir.cur.mtime, dir.cur.ctime, n.cur.ctime = now, now, now
	n.links--
	fs.dropIfUnused(n)
}

// rename flags (linux/fs.h).
const (
	renameNoReplace = 1
)

// Rename moves the name at once in the current view (atomically, as
// POSIX wants); in the durable view the old name goes when its directory
// is fsynced and the new one comes when its directory is.
func (fs *fileSystem) Rename(_ <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	st := fs.enter()
	defer fs.mu.Unlock()
	if !st.Ok() {
		return st
	}
	if in.Flags&^renameNoReplace != 0 {
		return fuse.EINVAL // RENAME_EXCHANGE, RENAME_WHITEOUT: nothing in a data dir uses them
	}
	from, st := fs.dir(in.NodeId)
	if !st.Ok() {
		return st
	}
	to, st := fs.dir(in.Newdir)
	if !st.Ok() {
		return st
	}
	n := from.cur.entries[oldName]
	if n == nil {
		return fuse.ENOENT
	}
	old := to.cur.entries[newName]
	if old == n {
		return fuse.OK
	}
	if n.isDir() {
		// Not into itself or below.
		for d := to; ; d = d.parent {
			if d == n {
				return fuse.EINVAL
			}
			if d.parent == d {
				break
			}
		}
	}
	if old != nil {
		switch {
		case in.Flags&renameNoReplace != 0:
			return fuse.Status(syscall.EEXIST)
		case n.isDir() && !old.isDir():
			return fuse.ENOTDIR
		case !n.isDir() && old.isDir():
			return fuse.Status(syscall.EISDIR)
		case old.isDir() && len(old.cur.entries) > 0:
			return fuse.Status(syscall.ENOTEMPTY)
		}
		fs.unlinkLocked(to, newName, old)
	}
	delete(from.cur.entries, oldName)
	to.cur.entries[newName] = n
	n.name = newName
	if n.isDir() {
		n.parent = to
	}
	now := time.Now()
	from.cur.mtime, from.cur.ctime, to.cur.mtime, to.cur.ctime, n.cur.ctime = now, now, now, now, now
	return fuse.OK
}

func (fs *fileSystem) OpenDir(_ <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	st := fs.enter()
	defer fs.mu.Unlock()
	if !st.Ok() {
		return st
	}
	dir, st := fs.dir(in.NodeId)
	if !st.Ok() {
		return st
	}
	fs.open(dir, out)
	h := fs.handles[out.Fh]
	for _, name := range dir.sortedNames() {
		c := dir.cur.entries[name]
		h.names = append(h.names, name)
		h.inos = append(h.inos, c.ino)
		h.modes = append(h.modes, c.cur.mode)
	}
	return fuse.OK
}

// ReadDir lists the entries as they were at opendir; "." and ".." are
// left out (Go's os.ReadDir drops them anyway).
func (fs *fileSystem) ReadDir(_ <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	st := fs.enter()
	defer fs.mu.Unlock()
	if !st.Ok() {
		return st
	}
	h, st := fs.handle(in.Fh)
	if !st.Ok() {
		return st
	}
	for i := int(in.Offset); i < len(h.names); i++ {
		if !out.AddDirEntry(fuse.DirEntry{Name: h.names[i], Ino: h.inos[i], Mode: h.modes[i], Off: uint64(i + 1)}) {
			break
		}
	}
	return fuse.OK
}

// blocks is the space a file of size bytes takes: whole pages, holes
// included (the ballast of the disk family is fallocated, never written).
func blocks(size int64) int64 { return (size + pageSize - 1) / pageSize }

// usedLocked is the pages the files of the current view take: those named
// or open.
func (fs *fileSystem) usedLocked() int64 {
	var used int64
	for _, n := range fs.inodes {
		if !n.isDir() && (n.links > 0 || n.opens > 0) {
			used += blocks(n.cur.size)
		}
	}
	return used
}

// reserve fails with ENOSPC when growing n to size would take more than
// the capacity (the disk family fills a data dir on lazyfs as on a tmpfs).
func (fs *fileSystem) reserve(n *inode, size int64) fuse.Status {
	grow := blocks(size) - blocks(n.cur.size)
	if grow > 0 && fs.usedLocked()+grow > fs.capacity/pageSize {
		return fuse.Status(syscall.ENOSPC)
	}
	return fuse.OK
}

func (fs *fileSystem) StatFs(_ <-chan struct{}, _ *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	st := fs.enter()
	defer fs.mu.Unlock()
	if !st.Ok() {
		return st
	}
	used := uint64(fs.usedLocked())
	out.Bsize, out.Frsize, out.NameLen = pageSize, pageSize, 255
	out.Blocks = uint64(fs.capacity / pageSize)
	out.Bfree = out.Blocks - min(used, out.Blocks)
	out.Bavail = out.Bfree
	out.Files = 1 << 20
	out.Ffree = out.Files - min(uint64(len(fs.inodes)), out.Files)
	return fuse.OK
}

// syncFailure is one armed fsync failure (Mount.FailSync), or power
// failure at an fsync (Mount.FreezeAtSync).
type syncFailure struct {
	suffix string
	freeze bool             // the power fails: nothing reaches the disk from this fsync on
	done   chan SyncFailure // receives the failure once it happened
}

// SyncFailure is an fsync that FailSync made fail.
type SyncFailure struct {
	Name    string // the file's name
	Dropped int    // dirty pages marked clean without reaching the disk
}

// failSyncLocked fails this fsync of n if a failure armed for its name is
// pending: n's dirty pages are dropped as a failed writeback drops them.
func (fs *fileSystem) failSyncLocked(n *inode) bool {
	for k, f := range fs.failSyncs {
		if !strings.HasSuffix(n.name, f.suffix) {
			continue
		}
		fs.failSyncs = slices.Delete(fs.failSyncs, k, k+1)
		if f.freeze {
			// The file's pages stay dirty: the cut that follows decides
			// which of them reached the disk.
			fs.frozen = true
			f.done <- SyncFailure{Name: n.name}
		} else {
			f.done <- SyncFailure{Name: n.name, Dropped: n.dropDirty()}
		}
		return true
	}
	return false
}

// slowSync waits SlowSyncs' delay, as a disk whose flushes take long:
// the caller's fsync waits, other requests go on.
func (fs *fileSystem) slowSync() {
	if d := time.Duration(fs.syncDelay.Load()); d > 0 {
		fs.slowed.Add(1)
		time.Sleep(d)
	}
}
