// Package nodeid pins a node's ID to its data dir: a data dir belongs to
// one node for life, server or client agent.
package nodeid

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/plugreg/plugreg/internal/atomicfile"
)

// Claim records id in dir, or checks it against the one recorded.
func Claim(dir, id string) error {
	path := filepath.Join(dir, "node-id")
	b, err := os.ReadFile(path)
	switch {
	case err == nil && strings.TrimSpace(string(b)) != "":
		if got := strings.TrimSpace(string(b)); got != id {
			return fmt.Errorf("data dir %s belongs to node %q, not %q", dir, got, id)
		}
		return nil
	case err == nil, errors.Is(err, os.ErrNotExist):
		// An empty file names no node: a plain write, which a power cut
		// can leave empty, is what an older release made of it. Written
		// whole or not at all (atomicfile), so an agent is never refused
		// a start by a file that holds nothing.
		return atomicfile.WriteFile(path, []byte(id+"\n"), 0o640)
	default:
		return fmt.Errorf("read node id: %w", err)
	}
}
