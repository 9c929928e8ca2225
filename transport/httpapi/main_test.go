package httpapi_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test must leave no goroutine behind: servers, streams and watches
// all stop.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Idle keep-alive connections of the tests' HTTP clients.
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		// A probe memberlist started just before Shutdown: Shutdown does
		// not wait for it, and it returns by itself after its timeout.
		goleak.IgnoreAnyFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"))
}
