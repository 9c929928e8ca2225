package agent

import (
	"fmt"
	"testing"
	"time"
)

// Consul's scale factor: 1 up to 128 members, one more each time the
// fleet doubles past it.
func TestAntiEntropyScaleFactor(t *testing.T) {
	for _, tc := range []struct{ members, want int }{
		{0, 1}, {1, 1}, {128, 1}, {129, 2}, {256, 2}, {257, 3}, {1000, 4}, {10_000, 8}, {50_000, 10}, {100_000, 11},
	} {
		if got := aeScaleFactor(tc.members); got != tc.want {
			t.Errorf("aeScaleFactor(%d) = %d, want %d", tc.members, got, tc.want)
		}
	}
}

// A wait is drawn from [d/2, 3d/2): the draw's extremes land on the
// bounds. The round after servers came back waits from [0, spread),
// spread a second per serverUpRate members, never past the interval.
func TestAntiEntropySchedule(t *testing.T) {
	lowest := func(int64) int64 { return 0 }
	highest := func(n int64) int64 { return n - 1 }
	for _, tc := range []struct {
		d        time.Duration
		min, max time.Duration
	}{
		{time.Second, 500 * time.Millisecond, 1500*time.Millisecond - 1},
		{30 * time.Second, 15 * time.Second, 45*time.Second - 1},
		{0, 0, 0},
	} {
		if got := syncWait(tc.d, lowest); got != tc.min {
			t.Errorf("syncWait(%v) lowest %v, want %v", tc.d, got, tc.min)
		}
		if got := syncWait(tc.d, highest); got != tc.max {
			t.Errorf("syncWait(%v) highest %v, want %v", tc.d, got, tc.max)
		}
	}
	for _, tc := range []struct {
		members  int
		interval time.Duration
		spread   time.Duration
	}{
		{0, 30 * time.Second, 0},
		{3, 30 * time.Second, 15 * time.Millisecond},
		{1000, 30 * time.Second * 4, 5 * time.Second},
		{10_000, 30 * time.Second * 8, 50 * time.Second},
		{100_000, 30 * time.Second * 11, 30 * time.Second * 11}, // the interval bounds it
	} {
		t.Run(fmt.Sprintf("%d members", tc.members), func(t *testing.T) {
			if got := serverUpDelay(tc.members, tc.interval, lowest); got != 0 {
				t.Errorf("lowest draw: %v, want 0", got)
			}
			want := max(tc.spread-1, 0)
			if got := serverUpDelay(tc.members, tc.interval, highest); got != want {
				t.Errorf("highest draw: %v, want %v", got, want)
			}
		})
	}
}
