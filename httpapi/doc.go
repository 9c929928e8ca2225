// Package httpapi serves plugreg's HTTP API (JSON; see docs/api.md) for
// one server node. Every input is validated here, at the edge: a bad
// request is answered 400/413 and never reaches the Raft log.
//
// Caller's duties: Serve on a listener, Shutdown on the way out (it ends
// open event streams first, then waits for in-flight requests).
package httpapi
