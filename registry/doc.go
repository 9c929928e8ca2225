// Package registry is a node's watch hub: the Journal that its FSM feeds
// (fsm.Sink) with every applied entry's events, and the subscriptions
// (Hub.Watch) that read it, each from its own goroutine.
//
// It holds no write path: in a cluster, writes are proposed through Raft
// by package cluster (cluster/write.go); in one process, by
// localreg.Local. Either way the FSM hands the entry's events to
// this node's Journal, from which each subscription delivers them. Every
// node applies the same log, so every node's journal holds the same
// sequence and subscribers anywhere see the same order.
//
// Caller's duties:
//
//  1. Build the pieces in order: NewJournal, fsm.New(journal), NewHub.
//  2. Call Hub.Shutdown once done: it closes the journal and every
//     subscription's channel and waits for their goroutines. It is
//     idempotent.
//  3. Events from Hub.Deliver and DeliverFromState carry the journal's
//     records, shared with every other such subscriber: read them, never
//     modify them.
package registry
