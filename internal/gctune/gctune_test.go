package gctune

import (
	"math"
	"runtime/debug"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLimit(t *testing.T) {
	const mib = 1 << 20
	cases := []struct {
		name        string
		live, other uint64
		want        uint64
	}{
		{"small heap: the floor", 10 * mib, 20 * mib, 20*mib + 10*mib + 256*mib},
		{"at the floor's reach", 512 * mib, 20 * mib, 20*mib + 512*mib + 256*mib},
		{"large heap: half of it", 1024 * mib, 20 * mib, 20*mib + 1024*mib + 512*mib},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := (Config{}).Limit(tc.live, tc.other); got != tc.want {
				t.Fatalf("Limit(%d MiB, %d MiB) = %d MiB, want %d MiB", tc.live/mib, tc.other/mib, got/mib, tc.want/mib)
			}
		})
	}
}

// Start sets a limit above what the process uses; Stop restores the one
// it found and leaves no goroutine behind.
func TestStartStop(t *testing.T) {
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	before := debug.SetMemoryLimit(-1)
	tu := Start(Config{Interval: time.Millisecond})
	if tu == nil {
		t.Fatal("Start did nothing without GOGC or GOMEMLIMIT")
	}
	time.Sleep(10 * time.Millisecond)
	limit := debug.SetMemoryLimit(-1)
	if limit == math.MaxInt64 || limit < 256<<20 {
		t.Fatalf("limit %d while tuning", limit)
	}
	tu.Stop()
	tu.Stop()
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Fatalf("limit %d after Stop, want %d", got, before)
	}
}

func TestOperatorSettingsWin(t *testing.T) {
	for _, env := range []string{"GOGC", "GOMEMLIMIT"} {
		t.Run(env, func(t *testing.T) {
			t.Setenv(env, "100")
			if tu := Start(Config{}); tu != nil {
				tu.Stop()
				t.Fatalf("Start tuned although %s is set", env)
			}
		})
	}
}
