//go:build linux && !race

package proctest

// RaceEnabled: the test binary does not run under the race detector (see
// race.go).
const RaceEnabled = false
