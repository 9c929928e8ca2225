// Package client is plugreg's Go client for the HTTP API.
//
// A Client takes several node addresses. On a connection failure, or a 503
// from a node without a leader, it moves to the next node and tries again
// until the request's context ends. Every write carries a request ID, kept
// across its retries, so the cluster applies it at most once however the
// retries fall (the FSM remembers recent IDs and answers a retry with the
// original result). Watch follows the event stream across node failures
// and resumes where it stopped, without a gap or a duplicate. A
// registration with a TTL is leased: Renew renews it once, KeepAlive keeps
// it (lease.go).
package client
