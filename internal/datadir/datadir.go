// Package datadir keeps an agent's data dir its own: the Raft log, the
// snapshots, the keyring and the node's identity are the registry's whole
// state and its secrets (token hashes, the gossip key). The stores plugreg
// uses create some of their files 0644 and dirs 0755 (raft-wal's
// segments and meta store, raft's snapshots), which was safe only while
// plugreg made the data dir itself, 0750: a dir an operator or a Helm
// hostPath made 0755 let every local user read the registry. So what
// plugreg writes there is made 0600 (files) and 0700 (dirs) whoever made
// the data dir, and a data dir readable by others is warned about.
package datadir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/plugreg/plugreg/internal/atomicfile"
)

// Modes of what plugreg writes in a data dir.
const (
	FileMode fs.FileMode = 0o600
	DirMode  fs.FileMode = 0o700
	// Mode of a data dir plugreg makes: its group may reach a file by
	// name (the plugin socket, DATA-DIR/plugin.sock by default, is 0660
	// for -plugin-socket-group) but not list or read anything else.
	Mode fs.FileMode = 0o710
)

// Create makes dir, with Mode, if it does not exist yet.
func Create(dir string) error {
	if err := MkdirAll(dir, Mode); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	return nil
}

// MkdirAll makes dir and its missing parents with mode, as os.MkdirAll
// does, and syncs the parent of each dir it made: a new dir's name is
// durable only once its parent is synced, and without it a power cut
// right after the first start could take the whole data dir (whatever
// was synced inside it) with it.
func MkdirAll(dir string, mode fs.FileMode) error {
	var made []string // the dirs missing, deepest first
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil || !errors.Is(err, fs.ErrNotExist) {
			break
		}
		made = append(made, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := os.MkdirAll(dir, mode); err != nil {
		return err
	}
	for _, d := range made {
		if err := atomicfile.SyncDir(filepath.Dir(d)); err != nil {
			return err
		}
	}
	return nil
}

// Tighten makes every dir under dir DirMode and every regular file
// FileMode (dir itself keeps its mode: it may be a mount point, or shared
// with the plugin socket's group; sockets and symlinks are left as they
// are).
func Tighten(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil // removed while walking (a snapshot's temp dir)
			}
			return err
		}
		if path == dir {
			return nil
		}
		switch {
		case d.IsDir():
			return setMode(path, d, DirMode)
		case d.Type().IsRegular():
			return setMode(path, d, FileMode)
		}
		return nil
	})
}

// setMode sets path to mode unless it has it already (a chmod a walk of
// an unchanged dir need not make).
func setMode(path string, d fs.DirEntry, mode fs.FileMode) error {
	info, err := d.Info()
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	if info.Mode().Perm() == mode {
		return nil
	}
	if err := os.Chmod(path, mode); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("make %s its owner's alone: %w", path, err)
	}
	return nil
}

// Private sets path (a file plugreg just made) to FileMode, or DirMode
// for a dir, whatever the umask and the creating library's mode.
func Private(path string) error {
	info, err := os.Lstat(path)
	if err != nil {
		return err
	}
	mode := FileMode
	if info.IsDir() {
		mode = DirMode
	}
	if err := os.Chmod(path, mode); err != nil {
		return fmt.Errorf("make %s its owner's alone: %w", path, err)
	}
	return nil
}

// WarnIfListable logs a warning when dir may be listed by its group or
// by other users: the files in it are the agent's alone, but their names
// are not.
func WarnIfListable(dir string, logger interface {
	Warn(msg string, args ...interface{})
}) {
	info, err := os.Stat(dir)
	if err != nil || info.Mode().Perm()&0o044 == 0 {
		return
	}
	logger.Warn("the data dir may be listed by its group or by other users (its files are the agent's alone, their names are not): chmod 0700 it, or 0710 to leave the plugin socket in it to its group",
		"data_dir", dir, "mode", fmt.Sprintf("%04o", info.Mode().Perm()))
}
