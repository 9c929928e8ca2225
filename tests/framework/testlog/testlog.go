// Package testlog sends a test's hclog output to t.Log for as long as the
// test runs, and drops it after.
//
// Libraries plugreg runs do not all stop their goroutines before Shutdown
// returns: memberlist's probe loop can be mid-probe when Shutdown closes
// its transport and log the failed ping a moment later. t.Log after a test
// has completed panics and fails the whole package, so the writer stops
// passing lines on once the test's cleanups are done.
package testlog

import (
	"bytes"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// Writer is an io.Writer onto t.Log that goes quiet when the test ends.
type Writer struct {
	t    testing.TB
	mu   sync.Mutex
	done bool
}

// NewWriter returns a Writer for t. Cleanups run last-registered first, so
// a Writer made before the servers it logs for are started keeps their
// shutdown messages; one made after misses them, but never panics.
func NewWriter(t testing.TB) *Writer {
	w := &Writer{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return w
}

// Write logs p as one line of the test's output until the test ends.
func (w *Writer) Write(p []byte) (int, error) {
	// The lock is held across t.Log so that the cleanup cannot mark the
	// test done between the check and the call.
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// Logger returns an hclog.Logger named name at level, writing to w.
func (w *Writer) Logger(name string, level hclog.Level) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: level, Output: w})
}

// New returns a logger for t: NewWriter(t).Logger(name, level).
func New(t testing.TB, name string, level hclog.Level) hclog.Logger {
	return NewWriter(t).Logger(name, level)
}

// Buffer collects log output written from many goroutines, for a test to
// read what was logged. The zero value is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
