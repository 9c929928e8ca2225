// Package lazyfs is a FUSE filesystem, all in memory, that loses what was
// not fsynced when the power is cut, as Jepsen's LazyFS does: the fault
// suite's powerloss family (tools/jepsen) puts each server's data dir on
// one and cuts the power under the agent, and the product's own tests
// (through tests/framework/lazymount) show what a file write survives.
//
// It owns the mount (New mounts it with mount(2) directly, so the caller
// must be root and /dev/fuse must exist; Unmount always, it is
// idempotent) and the goroutine that serves it. The caller's duties:
//
//  1. Cut with a kill function that SIGKILLs every process using the
//     mount and returns once they have exited; a process left alive would
//     see its open files fail with EIO for ever.
//  2. Unmount before exiting, also on failure: a mount whose server is
//     gone answers ENOTCONN until unmounted.
//
// # What is durable
//
// Every inode has two views: the current one, which processes see, and
// the durable one, which a cut leaves. File data is kept in 4 KiB pages
// shared by the two views and copied on write, so that an fsync copies
// only the pages written since the last one.
//
//   - fsync(file) makes its data, size and attributes (mode, owner, times)
//     durable; fdatasync(file) its data and size. Neither makes its name
//     durable.
//   - fsync(dir) makes the directory's entry set durable: the names
//     created, renamed in or out, and removed since its last fsync, each
//     name bound to the inode it names now.
//   - A file whose name is durable but whose data never was comes back
//     with its durable data: empty, for a file created, written, named
//     durably and never fsynced (ext4's zero-length files after a crash).
//   - rename is atomic in the current view. In the durable view the old
//     name goes when the source directory is fsynced and the new one comes
//     when the target directory is: a rename across directories can come
//     back under both names (a hard link) or neither.
//   - After a cut, files and directories no durable entry reaches are
//     gone, and so are all open files: a handle opened before a cut fails
//     with EIO for ever.
//   - close(2) syncs nothing, and nothing is flushed in the background: a
//     page stays unsynced until its file is fsynced, however long ago it
//     was written.
//
// That is Config.Names POSIX, the default. With Journal, every fsync or
// fdatasync, of any file or directory, also makes every name change made
// before it durable, in every directory: one ordered metadata journal,
// committed whole by any fsync, as ext4 and XFS do. File data is the same
// in both modes.
//
// POSIX is the strictest reading, the one ALICE tests against; it is
// stricter than both ext4 and Jepsen's LazyFS:
//
//   - ext4 (data=ordered) commits its journal on any fsync, which makes
//     every earlier metadata change durable (names, renames, unlinks, in
//     every directory), and writes back dirty pages within about 30 s;
//     its auto_da_alloc also flushes a file's data before a rename over
//     another or a truncate to zero. Here a name needs an fsync of its
//     own directory, and nothing is written back unasked.
//   - LazyFS caches only file data and passes metadata operations (create,
//     rename, unlink) to the filesystem under it at once, so it never
//     loses a name; this package can, as POSIX allows.
//
// So a program that survives POSIX mode survives ext4 as far as names
// go; one that fails here may or may not fail on ext4, and the failure
// says which fsync is missing. Journal mode is ext4 for names, and
// stricter than ext4 for data (no writeback, no auto_da_alloc).
//
// # The cut
//
// Every FUSE request holds one mutex while it runs, so a cut falls between
// two requests. From the cut's first instant every request fails with
// EIO and changes nothing (the dying process's own closes included: it
// must be answered to exit); the kill function runs then; then every
// inode reachable from the root through durable entries takes its
// durable view, the rest are forgotten, and the kernel is told to drop
// its cached pages and attributes of every inode. Entries and attributes
// are replied with zero timeouts and files opened without keep-cache, so
// the kernel asks again after a cut rather than believe its cache; a
// new mmap reads through the kernel's page cache, which the open and the
// invalidation emptied.
//
// # What is not modelled
//
// Torn pages (a page is durable whole or not at all), reordering within
// an fsync, lost fsyncs (fsync never fails), hard links, symlinks,
// xattrs, devices. Space is counted simply: a file takes whole
// pages up to its size, holes included, for as long as it is named or
// open in the current view; a write or fallocate that grows a file past
// Config.Capacity fails with ENOSPC. flock and POSIX locks are kept by the kernel, as
// on a local filesystem; they die with the process, so a cut frees them.
package lazyfs
