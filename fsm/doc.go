// Package fsm owns plugreg's replicated state: the commands that change it,
// their wire encoding, the Raft state machine that applies them, and the
// RegistryState snapshot format.
//
// The package is pure: no goroutines, no clock, no network. Everything it
// does is a deterministic function of the log it is fed, so every node that
// applies the same log reaches byte-identical state and emits the same
// events in the same order.
//
// State is persistent (copy-on-write): a two-level immutable radix tree
// (type -> name -> recency list), each recency list a pair of persistent
// B+trees (by registration, newest first, and by AllocID; recency.go), so
// a write costs O(log L) in a name of L instances, not O(L): a
// cluster-wide registry's name has one instance per host, tens of
// thousands of them. Apply builds a new root and swaps it in
// with one atomic store, so a reader or a snapshot takes the current root in
// O(1) and never waits for Apply, and Apply never waits for them.
//
// Caller's duties:
//
//  1. Validate input with ValidatePlugin (or let EncodeCommand do it) before
//     a command is proposed: a bad request must never reach the log. Apply
//     validates again and answers an error result, deterministically, on
//     every node.
//  2. Give New a Sink that never blocks: it is called on the Apply path.
//  3. Treat every *PluginInfo obtained from a State as read-only; it is
//     shared with the live state. Use Copy before handing one to code you do
//     not own.
//  4. Expect a panic from Apply on a command type this binary does not know
//     and that is not flagged as ignorable: applying past it would silently
//     diverge from newer nodes, so the node stops instead (as Nomad does).
package fsm
