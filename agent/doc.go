// Package agent is what runs on every host beside (or instead of) a
// server: the client agent, which joins the gossip pool as a client,
// reaches the servers over the internal RPC and serves the HTTP API
// locally (Client implements httpapi.Backend); and the host's
// registrations (Host), which every source of plugins on the host (the
// kubelet-protocol plugin watcher, the plugin SDK socket) writes through,
// and which anti-entropy keeps true in the registry.
//
// It never imports Raft: `go list -deps ./agent` shows only api,
// transport, gossip and their libraries.
//
// Caller's duties: New a Client, serve its Backend over HTTP, Shutdown it
// on the way out (Leave first for a graceful departure).
package agent
