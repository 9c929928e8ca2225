package main

import (
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// The agent's stop is bounded whatever stop itself does: it returns stop's
// result when stop finishes, gives up after the grace period when stop
// hangs (a Raft goroutine parked forever), and returns at once on a second
// signal.
func TestStopWithin(t *testing.T) {
	hang := make(chan struct{})
	defer close(hang)
	errStop := errors.New("stop failed")
	cases := []struct {
		name   string
		stop   func() error
		signal bool
		want   error
	}{
		{"stop finishes", func() error { return nil }, false, nil},
		{"stop fails", func() error { return errStop }, false, errStop},
		{"stop hangs", func() error { <-hang; return nil }, false, errStopTimeout},
		{"second signal", func() error { <-hang; return nil }, true, errStopForced},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sig := make(chan os.Signal, 1)
			if tc.signal {
				sig <- syscall.SIGTERM
			}
			grace := 200 * time.Millisecond
			if tc.signal {
				grace = time.Hour // only the signal can end it
			}
			err := stopWithin(hclog.NewNullLogger(), tc.stop, func() string { return "testing" }, grace, sig)
			if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}
