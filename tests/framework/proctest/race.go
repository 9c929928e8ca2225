//go:build linux && race

package proctest

// RaceEnabled: the test binary runs under the race detector; Build builds
// with it too, and StartCluster fails a test whose processes reported a
// race. (A build tag on a file of this package, not a _test.go file: those
// are compiled only into proctest's own tests, not into its importers'.)
const RaceEnabled = true
