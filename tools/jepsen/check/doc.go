// Package check holds the fault-injection suite's history format and its
// checkers. Every checker takes recorded data and returns the violations it
// found; none of them trusts plugreg's own code: the registry semantics are
// re-implemented here (model.go) from DESIGN.md, independently of fsm/.
//
// Checkers:
//   - Linearizable: porcupine over register, deregister, get and list,
//     partitioned by plugin type; unknown outcomes return at infinity; a
//     checker timeout is a failure.
//   - GroundTruth: the nodes' apply journals agree at every index.
//   - Writes: no lost, phantom or duplicated writes.
//   - ReadsAtIndex: a read equals the ground truth at the index it reports,
//     and that index covers every write acknowledged before the read began.
//   - Events: every subscriber session is filtered, ordered, atomic per
//     index, equal to the ground truth's events, with resets only where
//     the node's journal was outrun or replaced, and carrying exactly the
//     ground truth's state.
//   - Leaders: at most one leader per term.
package check
