// Package client is plugreg's Go client for the HTTP API.
//
// A Client takes several node addresses. On a connection failure, or a 503
// from a node without a leader, it moves to the next node and tries again
// until the request's context ends; but when every address has failed in a
// row for a reason waiting does not cure, the call ends at once: nothing
// listens there (ErrNoAgent: "no plugreg agent at 127.0.0.1:7700:
// connection refused"), what answers is not a plugreg agent
// (ErrNotPlugreg), or TLS refuses. Each connection attempt is bounded by
// Config.DialTimeout (2 s). A node that accepts the connection and
// never answers (a paused process, a host that drops packets) holds a call
// until its context ends, so give every call a deadline: the call that
// ran out on a node leaves it, and the next starts on the next node
// (KeepAlive bounds each renewal itself). Every write carries a request ID, kept
// across its retries, so the cluster applies it at most once however the
// retries fall (the FSM remembers recent IDs and answers a retry with the
// original result). Stream follows the event stream across node failures
// and resumes where it stopped, without a gap or a duplicate. A
// registration with a TTL is leased: Renew renews it once, KeepAlive keeps
// it (lease.go).
package client
