package pluginwatcher

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// checkDir refuses a Dir that does not exist, is not a directory, or
// cannot be listed.
// CheckDir reports why dir cannot be a plugins dir (it does not exist, is
// not a directory, or cannot be read), or nil. New checks it; an agent
// checks it before it starts anything else, so that a mistyped path is
// said at once.
func CheckDir(dir string) error { return checkDir(dir) }

func checkDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("%w: plugins dir %s: %v", ErrConfig, dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: plugins dir %s is not a directory", ErrConfig, dir)
	}
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("%w: plugins dir %s is not readable: %v", ErrConfig, dir, err)
	}
	defer f.Close()
	if _, err := f.Readdirnames(1); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: plugins dir %s is not readable: %v", ErrConfig, dir, err)
	}
	return nil
}

// hidden reports whether path, below root, has a component starting with
// '.': kubelet ignores such files, and plugreg ignores what is inside such
// directories too (they are never watched).
func hidden(root, path string) bool {
	rel, err := filepath.Rel(root, path)
	if err != nil || rel == "." {
		return false
	}
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		if strings.HasPrefix(part, ".") {
			return true
		}
	}
	return false
}

// found is one socket seen by the discovery: its path and the time it was
// created (its mtime, set when the plugin bound it), which orders sockets
// of one plugin name: the newest wins.
type found struct {
	path  string
	stamp time.Time
}

// walk adds a watch on dir and every directory below it, and returns the
// sockets found. It follows no symbolic link, so a link loop is harmless.
// An unreadable directory below dir is logged and skipped; an error on dir
// itself is returned.
func (w *Watcher) walk(fsw *fsnotify.Watcher, dir string) ([]found, error) {
	var out []found
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == dir {
				return err
			}
			w.log.Warn("skipping an unreadable path in the plugins dir", "path", path, "error", err)
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if hidden(w.cfg.Dir, path) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		switch {
		case d.IsDir():
			if err := fsw.Add(path); err != nil {
				if path == dir {
					return err
				}
				w.log.Warn("cannot watch a directory in the plugins dir; skipping it", "path", path, "error", err)
				return fs.SkipDir
			}
		case d.Type()&fs.ModeSocket != 0:
			fi, err := d.Info()
			if err != nil {
				return nil // gone already
			}
			out = append(out, found{path: path, stamp: fi.ModTime()})
		default:
			w.log.Trace("ignoring a file that is not a socket", "path", path, "mode", d.Type())
		}
		return nil
	})
	return out, err
}

// created handles a Create event: a new directory is walked (and watched),
// a new socket is returned; anything else is ignored.
func (w *Watcher) created(fsw *fsnotify.Watcher, path string) []found {
	if hidden(w.cfg.Dir, path) {
		return nil
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return nil // removed again before we looked
	}
	switch {
	case fi.IsDir():
		socks, err := w.walk(fsw, path)
		if err != nil {
			w.log.Warn("cannot watch a new directory in the plugins dir", "path", path, "error", err)
		}
		return socks
	case fi.Mode()&fs.ModeSocket != 0:
		return []found{{path: path, stamp: fi.ModTime()}}
	}
	w.log.Trace("ignoring a file that is not a socket", "path", path, "mode", fi.Mode())
	return nil
}
