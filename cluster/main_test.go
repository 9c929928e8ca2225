package cluster_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Shutdown must stop every goroutine a Server started (raft's, memberlist's
// and ours).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// A probe memberlist started just before Shutdown: Shutdown does
		// not wait for it, and it returns by itself after its timeout.
		goleak.IgnoreAnyFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"))
}
