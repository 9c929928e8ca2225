// Package api holds what the server, the Go client and plugins share on the
// wire: PluginInfo and its validation, write results, events and their
// types, the request-ID context key, and the validation sentinels. It
// depends on nothing of the server's (no raft, no fsm): `go list -deps
// ./client` must not list hashicorp/raft.
package api
