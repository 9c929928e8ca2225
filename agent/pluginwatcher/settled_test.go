package pluginwatcher

import (
	"errors"
	"path/filepath"
	"testing"
	"time"
)

// Settled closes only once every socket found at Start has been tried: the
// good one registered, the refusing one refused. Anti-entropy waits for it
// before removing anything, so a restarted agent never deregisters a
// plugin it has not yet re-discovered.
func TestSettledAfterTheFirstWalk(t *testing.T) {
	f := newFixture(t)
	startPlugin(t, filepath.Join(f.dir, "good.sock"), draInfo("good.example.com"))
	bad := startPlugin(t, filepath.Join(f.dir, "bad.sock"), draInfo("bad.example.com"))
	bad.setErr(errors.New("not today"))
	slow := startPlugin(t, filepath.Join(f.dir, "slow.sock"), draInfo("slow.example.com"))
	slow.setHang(true)
	w := f.start(t)
	select {
	case <-w.Settled():
		t.Fatal("settled while a socket of the first walk was still unanswered")
	case <-time.After(200 * time.Millisecond):
	}
	slow.setHang(false)
	eventually(t, "the watcher to settle", func() (bool, string) {
		select {
		case <-w.Settled():
			return true, ""
		default:
			return false, "not settled"
		}
	})
	// Settled means tried: the good plugin is registered by then.
	if len(f.reg.instances("DRAPlugin", "good.example.com")) != 1 {
		t.Fatal("settled before the good plugin was registered")
	}
}

// With nothing in the directory, the watcher settles at once.
func TestSettledEmpty(t *testing.T) {
	f := newFixture(t)
	w := f.start(t)
	eventually(t, "the watcher to settle", func() (bool, string) {
		select {
		case <-w.Settled():
			return true, ""
		default:
			return false, "not settled"
		}
	})
}
