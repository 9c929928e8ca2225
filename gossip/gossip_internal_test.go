package gossip

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// memberlist calls the event delegate synchronously under its own locks:
// the delegate must not wait on the disk. Here the peers file's temporary
// path is a FIFO nobody reads, so a write there blocks until a reader
// comes; a membership change must still return at once.
func TestMembershipChangeDoesNotWaitForTheDisk(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gossip-peers.json")
	if err := syscall.Mkfifo(path+".tmp", 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	m := &Pool{cfg: Config{NodeID: "self", PeersFile: path}, byName: map[string]*Member{}, meta: Meta{ID: "self", Role: "server"},
		changed: make(chan struct{}, 1), save: make(chan struct{}, 1)}
	peer := &memberlist.Node{Name: "peer", Meta: []byte(`{"ID":"peer","Role":"server"}`)}
	returned := make(chan struct{})
	go func() {
		(*delegate)(m).NotifyJoin(peer)
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		// Unblock the writer so the test can end, then fail.
		f, err := os.OpenFile(path+".tmp", os.O_RDONLY, 0)
		if err == nil {
			f.Close()
		}
		<-returned
		t.Fatal("NotifyJoin waited on the peers file")
	}
	select {
	case <-m.save:
	default:
		t.Fatal("NotifyJoin did not ask for the peers file to be written")
	}
}
