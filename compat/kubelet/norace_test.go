//go:build !race

package kubelet

const raceEnabled = false
