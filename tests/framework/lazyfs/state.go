package lazyfs

import (
	"maps"
	"math/rand"
	"slices"
	"syscall"
	"time"
)

// pageSize is the unit of file data that is copied on write and made
// durable: an fsync copies a file's dirty pages, never the whole file
// (raft-wal fsyncs 16 MiB preallocated segments after every batch).
const pageSize = 4096

type page [pageSize]byte

// attrs are an inode's metadata other than its size.
type attrs struct {
	mode         uint32 // type and permission bits (syscall.S_IF* | 07777)
	uid, gid     uint32
	atime, mtime time.Time
	ctime        time.Time
}

// view is one version of an inode: what processes see now (cur) or what a
// power cut leaves (dur).
type view struct {
	attrs
	size    int64             // regular files
	pages   map[int64]*page   // regular files, sparse: an absent page reads as zeros
	entries map[string]*inode // directories
}

// inode is a file or a directory. Its two views share the pages that were
// not written since the last sync: a page of cur that is not in dirty is
// the very page of dur (or absent from both), and is never written in
// place; writing one copies it first. Bytes of a page past the file's
// size are always zero, so growing a file needs no zeroing.
type inode struct {
	ino   uint64
	cur   view
	dur   view
	dirty map[int64]struct{} // cur's pages not shared with dur: written, zeroed or dropped since the last sync

	parent   *inode // directories: the current parent (the root's is itself), for rename's loop check
	name     string // the name it was created or last renamed under (FailSync matches it)
	links    int    // current directory entries that name it
	durLinks int    // durable directory entries that name it
	lookups  uint64 // the kernel's references: entries replied minus FORGETs
	opens    int    // open handles
}

func (n *inode) isDir() bool { return n.cur.mode&syscall.S_IFMT == syscall.S_IFDIR }

func newInode(ino uint64, a attrs) *inode {
	n := &inode{ino: ino, dirty: map[int64]struct{}{}}
	n.cur.attrs = a
	if a.mode&syscall.S_IFMT == syscall.S_IFDIR {
		n.cur.entries = map[string]*inode{}
		n.dur.entries = map[string]*inode{}
	} else {
		n.cur.pages = map[int64]*page{}
		n.dur.pages = map[int64]*page{}
	}
	// A new inode's durable self is empty, with the attributes it was
	// made with: if its name becomes durable (its directory is fsynced)
	// before its data is, it comes back empty, as a file created and
	// written but never fsynced does on ext4 after a crash.
	n.dur.attrs = a
	return n
}

// ownPage returns page idx of cur, copied first unless it is already
// private to cur.
func (n *inode) ownPage(idx int64) *page {
	p := n.cur.pages[idx]
	if _, ok := n.dirty[idx]; ok && p != nil {
		return p
	}
	np := new(page)
	if p != nil {
		*np = *p
	}
	n.cur.pages[idx] = np
	n.dirty[idx] = struct{}{}
	return np
}

// write writes data at off into the current view.
func (n *inode) write(off int64, data []byte) {
	end := off + int64(len(data))
	for len(data) > 0 {
		idx, po := off/pageSize, off%pageSize
		c := copy(n.ownPage(idx)[po:], data)
		data = data[c:]
		off += int64(c)
	}
	n.cur.size = max(n.cur.size, end)
}

// read reads the current view at off into buf, up to the file's end.
func (n *inode) read(off int64, buf []byte) int {
	if off >= n.cur.size {
		return 0
	}
	buf = buf[:min(int64(len(buf)), n.cur.size-off)]
	done := 0
	for done < len(buf) {
		idx, po := off/pageSize, off%pageSize
		var c int
		if p := n.cur.pages[idx]; p != nil {
			c = copy(buf[done:], p[po:])
		} else {
			c = copy(buf[done:], zeroPage[po:])
		}
		done += c
		off += int64(c)
	}
	return done
}

var zeroPage page

// zero zeroes [off, end) of the current view, within the file's size;
// pages wholly inside are dropped.
func (n *inode) zero(off, end int64) {
	end = min(end, n.cur.size)
	for off < end {
		idx, po := off/pageSize, off%pageSize
		c := min(int64(pageSize)-po, end-off)
		if po == 0 && c == pageSize {
			if _, ok := n.cur.pages[idx]; ok {
				delete(n.cur.pages, idx)
				n.dirty[idx] = struct{}{}
			}
		} else if n.cur.pages[idx] != nil {
			clear(n.ownPage(idx)[po : po+c])
		}
		off += c
	}
}

// truncate sets the current size: pages past it are dropped, and the tail
// of the last one zeroed, so that growing again reads zeros.
func (n *inode) truncate(size int64) {
	if size < n.cur.size {
		n.zero(size, n.cur.size)
		for idx := range n.cur.pages {
			if idx*pageSize >= size {
				delete(n.cur.pages, idx)
				n.dirty[idx] = struct{}{}
			}
		}
	}
	n.cur.size = size
}

// syncData makes the current data and size durable: only the dirty pages
// are copied (shared from now on).
func (n *inode) syncData() {
	for idx := range n.dirty {
		if p, ok := n.cur.pages[idx]; ok {
			n.dur.pages[idx] = p
		} else {
			delete(n.dur.pages, idx)
		}
	}
	clear(n.dirty)
	n.dur.size = n.cur.size
}

// dropDirty is what a failed writeback does to a file on Linux (the
// PostgreSQL "fsyncgate"): the dirty pages are marked clean without
// reaching the disk. Reads still return them until a power cut (or
// eviction); no later fsync writes them; the durable view keeps what it
// had. cur's pages then differ from dur's outside dirty, which is the
// point: nothing will ever sync them.
func (n *inode) dropDirty() int {
	dropped := len(n.dirty)
	clear(n.dirty)
	return dropped
}

// sectorSize is the unit a torn page is written in.
const sectorSize = 512

// keep lets some of n's unsynced pages reach the durable view, as k says
// (a power cut's writeback): whole, or one of them torn. It reports the
// pages kept whole and torn, and whether n is left partly written (some
// of its unsynced pages durable, not all, or one torn).
func (n *inode) keep(k Keep, rng *rand.Rand) (kept, torn int, partial bool) {
	if n.isDir() || len(n.dirty) == 0 {
		return 0, 0, false
	}
	idxs := slices.Sorted(maps.Keys(n.dirty))
	var chosen []int64
	switch k.Mode {
	case KeepSubset:
		for _, idx := range idxs {
			if rng.Intn(2) == 0 {
				chosen = append(chosen, idx)
			}
		}
	case KeepPrefix:
		chosen = idxs[:rng.Intn(len(idxs)+1)]
	}
	tear := int64(-1)
	switch {
	case !k.Tear || len(chosen) == 0:
	case k.Mode == KeepPrefix:
		tear = chosen[len(chosen)-1] // where the writeback stopped
	default:
		tear = chosen[rng.Intn(len(chosen))]
	}
	for _, idx := range chosen {
		p, ok := n.cur.pages[idx]
		switch {
		case !ok:
			delete(n.dur.pages, idx) // a page zeroed or cut off since the last sync
			kept++
		case idx == tear:
			np := new(page)
			if old := n.dur.pages[idx]; old != nil {
				*np = *old
			}
			s := 1 + rng.Intn(pageSize/sectorSize-1)
			copy(np[:s*sectorSize], p[:s*sectorSize])
			n.dur.pages[idx] = np
			torn++
		default:
			n.dur.pages[idx] = p // shared: cur copies a page before writing it again
			kept++
		}
	}
	if len(chosen) > 0 {
		// The size goes with the data written past it (ext4's ordered
		// mode), never past the current size.
		end := (chosen[len(chosen)-1] + 1) * pageSize // chosen is in file order
		n.dur.size = max(n.dur.size, min(n.cur.size, end))
	}
	return kept, torn, (len(chosen) > 0 && len(chosen) < len(idxs)) || torn > 0
}

// syncDir makes the directory's current entries durable, keeping the
// durable link counts of the entries it gains and loses.
func (n *inode) syncDir() {
	for _, c := range n.dur.entries {
		c.durLinks--
	}
	n.dur.entries = maps.Clone(n.cur.entries)
	for _, c := range n.dur.entries {
		c.durLinks++
	}
}

// unsynced reports what a cut would discard of n: dirty pages, and
// whether its entries or attributes differ from the durable ones.
func (n *inode) unsynced() (pages int, entries bool) {
	if n.isDir() {
		return 0, !maps.Equal(n.cur.entries, n.dur.entries)
	}
	return len(n.dirty), n.cur.size != n.dur.size
}

// restore makes the durable view current again (the power cut): the
// pages are shared, not copied.
func (n *inode) restore() {
	n.cur.attrs = n.dur.attrs
	n.cur.size = n.dur.size
	if n.dur.pages != nil {
		n.cur.pages = maps.Clone(n.dur.pages)
	}
	if n.dur.entries != nil {
		n.cur.entries = maps.Clone(n.dur.entries)
	}
	clear(n.dirty)
	n.links, n.durLinks, n.opens = 0, 0, 0
}

// sortedNames is a directory's current entry names in order (readdir).
func (n *inode) sortedNames() []string {
	return slices.Sorted(maps.Keys(n.cur.entries))
}
