// Package atomicfile replaces a file whole or not at all: the agent's small
// state files (the gossip keyring, the gossip peers, a saved snapshot)
// must never be found half written after a crash or a power cut.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// WriteFile writes data to path with mode perm through a temporary file in
// the same directory, synced before it is renamed over path (and the
// directory synced after): path holds the old contents or the new ones,
// never a part. The temporary file is removed on failure.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	err = tmp.Chmod(perm)
	if err == nil {
		_, err = tmp.Write(data)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	// The rename is durable once the directory is; a failure here leaves
	// a complete file either way, so it is not an error.
	SyncDir(dir)
	return nil
}

// SyncDir makes dir's entries durable: the names of files created, renamed
// or removed in it. A file's own fsync does not (ext4 happens to, POSIX
// does not promise it; jepsen's powerloss family with -powerloss-names
// posix loses such names).
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return nil
}
