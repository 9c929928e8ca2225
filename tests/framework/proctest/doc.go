// Package proctest runs real processes for tests: it builds packages of
// this repository (Build, with -race when the test binary has it), starts
// them with their output appended to a log file (Start), kills them with
// SIGKILL (Kill9) or stops them with SIGTERM within a bound (Terminate),
// shows the tail of their logs (LogTail), picks free loopback ports
// (FreePorts), waits for conditions while watching for processes that died
// unasked (Poll), and starts clusters of plugreg agents: servers and client
// agents, on loopback (StartCluster).
//
// Every process is started with Pdeathsig: if the test binary dies (a
// panic, go test's -timeout), its processes die with it rather than linger
// on the machine. That is Linux's, so the package is Linux only.
//
// A test package that calls Build calls RemoveBuilds after its tests, from
// TestMain (Main does both):
//
//	func TestMain(m *testing.M) { proctest.Main(m) }
package proctest
