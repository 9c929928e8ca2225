//go:build race

package kubelet

// raceEnabled: this test binary runs under the race detector, and builds
// the agents it starts with it too.
const raceEnabled = true
