package agent

// SetHostRand fixes the draws of h's schedule (jitter, spread): f(n) is in
// [0, n). Before Run.
func SetHostRand(h *Host, f func(n int64) int64) { h.rand = f }
