package backoff

import (
	"testing"
	"time"
)

func TestJittered(t *testing.T) {
	lo, hi := 100*time.Millisecond, 5*time.Second
	for _, tc := range []struct {
		attempt int
		want    time.Duration // the upper bound; the wait is in [want/2, want]
	}{
		{0, lo}, {1, lo}, {2, 2 * lo}, {3, 4 * lo}, {6, 32 * lo}, {7, hi}, {100, hi},
	} {
		for i := 0; i < 200; i++ {
			if d := Jittered(lo, hi, tc.attempt); d < tc.want/2 || d > tc.want {
				t.Fatalf("attempt %d: %v, want within [%v, %v]", tc.attempt, d, tc.want/2, tc.want)
			}
		}
	}
}
