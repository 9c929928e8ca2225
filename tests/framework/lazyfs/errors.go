package lazyfs

import "errors"

// ErrServing is returned by Unmount when the filesystem still served
// requests 10 s after it was unmounted, detached and its connection
// aborted: a process stuck in it, which the caller must kill.
var ErrServing = errors.New("lazyfs: still serving after unmount; kill the processes using the mount")

// ErrCapacity is returned by New for a capacity under one page.
var ErrCapacity = errors.New("lazyfs: capacity under 4 KiB")

// ErrNames is returned by New for a Names that is neither POSIX nor
// Journal.
var ErrNames = errors.New("lazyfs: unknown names mode")
