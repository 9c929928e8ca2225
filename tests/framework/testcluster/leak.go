package testcluster

import "go.uber.org/goleak"

// LeakOptions are the goroutines a test package that starts clusters may
// leave behind, for goleak.VerifyTestMain: every other one is a leak.
func LeakOptions() []goleak.Option {
	return []goleak.Option{
		// Idle keep-alive connections of the tests' HTTP clients.
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		// A probe memberlist started just before Shutdown: Shutdown does
		// not wait for it, and it returns by itself after its timeout.
		goleak.IgnoreAnyFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"),
		// A wait on a raft future that raft dropped at shutdown (see
		// raftx.Await): raft never answers it, the server stopped
		// waiting, and it ends with the process.
		goleak.IgnoreAnyFunction("github.com/plugreg/plugreg/cluster/raftx.Await.func1"),
	}
}
