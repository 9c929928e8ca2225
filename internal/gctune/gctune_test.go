package gctune

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Percent without and with SmallHeaps: with it, a heap below the floor
// gets the floor as headroom too (GOGC above 100); from the floor's reach
// on, the two agree.
func TestPercent(t *testing.T) {
	const mib = 1 << 20
	cases := []struct {
		name  string
		small bool
		live  uint64
		want  int
	}{
		{"empty heap: the default", false, 0, 100},
		{"small heap: the default", false, 10 * mib, 100},
		{"at the floor's reach", false, 256 * mib, 100},
		{"between: the floor", false, 400 * mib, 64},
		{"twice the floor: half", false, 512 * mib, 50},
		{"large heap: half", false, 4096 * mib, 50},
		{"SmallHeaps, empty heap: the default", true, 0, 100},
		{"SmallHeaps, a nearly empty heap: the floor over 16 MiB", true, 1 * mib, 1600},
		{"SmallHeaps, small heap: the floor", true, 32 * mib, 800},
		{"SmallHeaps, at the floor's reach", true, 256 * mib, 100},
		{"SmallHeaps, between: the floor", true, 400 * mib, 64},
		{"SmallHeaps, large heap: half", true, 4096 * mib, 50},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := (Config{SmallHeaps: tc.small}).Percent(tc.live); got != tc.want {
				t.Fatalf("Percent(%d MiB) = %d, want %d", tc.live/mib, got, tc.want)
			}
		})
	}
}

// gcPercent reads GOGC without changing it.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// Start sets GOGC from the live heap (this test's is small: 100); Stop
// restores the one it found and leaves no goroutine behind.
func TestStartStop(t *testing.T) {
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	before := debug.SetGCPercent(73)
	defer debug.SetGCPercent(before)
	tu := Start(Config{Interval: time.Millisecond})
	if tu == nil {
		t.Fatal("Start did nothing without GOGC or GOMEMLIMIT")
	}
	time.Sleep(10 * time.Millisecond)
	if p := gcPercent(); p != 100 {
		t.Fatalf("GOGC %d while tuning a small heap, want 100", p)
	}
	tu.Stop()
	tu.Stop()
	if got := gcPercent(); got != 73 {
		t.Fatalf("GOGC %d after Stop, want 73 (the one Start found)", got)
	}
}

// A live heap past the floor's reach lowers GOGC on the next update.
func TestFollowsTheLiveHeap(t *testing.T) {
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	tu := Start(Config{Floor: 1 << 20, Interval: time.Millisecond})
	defer tu.Stop()
	live := make([][]byte, 64)
	for i := range live {
		live[i] = make([]byte, 1<<20) // 64 MiB live: headroom 32 MiB
	}
	deadline := time.Now().Add(10 * time.Second)
	for gcPercent() != 50 {
		if time.Now().After(deadline) {
			t.Fatalf("GOGC %d with 64 MiB live and a 1 MiB floor, want 50", gcPercent())
		}
		runtime.GC() // the live-heap metric is the last cycle's
		time.Sleep(5 * time.Millisecond)
	}
	runtime.KeepAlive(live)
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
