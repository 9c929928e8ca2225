// Package backoff is the agent's one jittered exponential backoff (the
// plugin SDK, package stub, keeps a copy of its own: it imports nothing of
// the agent).
package backoff

import (
	"math/rand/v2"
	"time"
)

// Jittered is the wait before retry number attempt (1, 2, ...): lo doubled
// attempt-1 times, at most hi, then a random point in its upper half, so
// that many retrying peers do not come back in step.
func Jittered(lo, hi time.Duration, attempt int) time.Duration {
	d := lo << min(max(attempt-1, 0), 30)
	if d <= 0 || d > hi {
		d = hi
	}
	return d/2 + rand.N(d/2+1)
}
