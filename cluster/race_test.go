//go:build race

package cluster_test

// raceEnabled: the race detector is on, under which sync.Pool drops what
// it is given, so pooled buffers (TLS records) are allocated anew.
const raceEnabled = true
