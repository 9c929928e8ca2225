// Package registry is plugreg's public Go API: the Registry interface of
// Nomad's dynamicplugins, served from an fsm.FSM's state, with writes
// proposed through an Applier (raft in a cluster, LocalApplier in one
// process) and an event journal that every subscription reads from.
//
// Data flows one way: a write is encoded and validated here, proposed
// through the Applier, applied by the FSM (on every node, in a cluster),
// and the FSM hands the entry's events to this node's Journal, from which
// each subscription's own goroutine delivers them. Reads take the FSM's
// current immutable state and never wait for Apply.
//
// Caller's duties:
//
//  1. Build the pieces in order: NewJournal, fsm.New(journal), the Applier
//     over that FSM, then New. (NewLocal does all of it for one process.)
//  2. Call Shutdown once done: it closes every subscription's channel and
//     waits for their goroutines. It is idempotent.
//  3. Treat the returned *PluginInfo values as yours: they are copies.
package registry
