package testlog

import (
	"fmt"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// recorder is a testing.TB that keeps what is logged and the cleanups, so
// the test can end it when it likes. Log panics once it has ended, as
// testing.T's does after the test completes.
type recorder struct {
	testing.TB
	mu       sync.Mutex
	lines    []string
	cleanups []func()
	ended    bool
}

func (r *recorder) Log(args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended {
		panic("Log in goroutine after the test has completed")
	}
	r.lines = append(r.lines, fmt.Sprint(args...))
}

func (r *recorder) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }

func (r *recorder) end() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
	r.mu.Lock()
	r.ended = true
	r.mu.Unlock()
}

func TestWriterGoesQuietWhenTheTestEnds(t *testing.T) {
	r := &recorder{TB: t}
	w := NewWriter(r)
	w.Logger("x", hclog.Info).Warn("during")
	r.end()
	// A library goroutine that outlived its Shutdown logs once more.
	w.Logger("x", hclog.Info).Warn("after")
	if len(r.lines) != 1 {
		t.Fatalf("logged %q, want only the line written during the test", r.lines)
	}
}

// Writes racing the end never reach a finished test. Without the lock
// around the check and the Log, -race reports the race on done (seen).
func TestWriterRacesTheEnd(t *testing.T) {
	r := &recorder{TB: t}
	w := NewWriter(r)
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 1000; j++ {
				fmt.Fprintf(w, "line %d\n", j)
			}
		}()
	}
	r.end()
	wg.Wait()
}
