package check

import "encoding/json"

// StubPluginType is the type of the stub plugins the harness runs: their
// agents register and deregister them, with no request ID.
const StubPluginType = "jplugin"

// Writes checks that no write was lost, duplicated or invented:
//   - an acknowledged write is in the ground truth exactly once (one entry
//     with its request ID that the FSM applied, not answered as a
//     duplicate), at the index and with the result it was acknowledged with;
//   - a write that definitely failed is not in it at all;
//   - a write of unknown outcome is in it at most once;
//   - every command in it carries a request ID some client issued, but
//     for the agents' own writes of stub plugins (byStubAgent).
func Writes(ops []Op, t *Truth) []Violation {
	var vs []Violation
	applied := map[string][]uint64{}
	for _, e := range t.Entries {
		if e.Kind != "command" || e.Duplicate || byStubAgent(&e) || byLeader(&e) {
			continue
		}
		applied[e.RequestID] = append(applied[e.RequestID], e.Index)
	}
	issued := map[string]bool{}
	for _, op := range ops {
		if !op.IsWrite() {
			continue
		}
		issued[op.RequestID] = true
		at := applied[op.RequestID]
		switch op.Outcome {
		case OK:
			if len(at) == 0 {
				vs = append(vs, violation("writes", "lost: %s %s/%s/%s (request %s) acknowledged at %d is not in the log",
					op.F, op.Type, op.Name, op.Alloc, op.RequestID, op.Index))
				continue
			}
			if at[0] != op.Index {
				vs = append(vs, violation("writes", "request %s acknowledged at %d but applied at %d", op.RequestID, op.Index, at[0]))
			}
			if e := t.Entry(at[0]); e != nil && e.Result != op.Result {
				vs = append(vs, violation("writes", "request %s acknowledged as %q but applied as %q", op.RequestID, op.Result, e.Result))
			}
		case Fail:
			if len(at) > 0 {
				vs = append(vs, violation("writes", "request %s failed definitely (%s) but was applied at %v", op.RequestID, op.Error, at))
			}
		}
		if len(at) > 1 {
			vs = append(vs, violation("writes", "duplicated: request %s applied at %v", op.RequestID, at))
		}
	}
	for id, at := range applied {
		if !issued[id] {
			vs = append(vs, violation("writes", "phantom: request %q applied at %v was never issued", id, at))
		}
	}
	return vs
}

// byLeader reports whether e is a command the leader writes of its own
// accord (its node-health marks of a client agent gossip saw fail, its
// lessor's expiries, its state checks): no request ID. The model replays
// it; it is exempt only from having been issued by the workload.
func byLeader(e *Entry) bool {
	switch e.Command {
	case "node-health", "node-health-batch", "expire", "state-check":
		return e.RequestID == ""
	}
	return false
}

// byStubAgent reports whether e is an agent's write of a stub plugin: no
// request ID, and a command on type StubPluginType (or an ACL command of
// a -secure run's setup). Only those are exempt from having been issued;
// any other command without a request ID is still a phantom.
func byStubAgent(e *Entry) bool {
	if e.RequestID != "" {
		return false
	}
	if IsACLCommand(e.Command) {
		return true // the harness's ACL setup: token creates carry no request ID
	}
	var req request
	if err := json.Unmarshal(e.Request, &req); err != nil {
		return false
	}
	if e.Command == "host-sync" { // every write of the round on the stub type
		for _, p := range req.Register {
			if p == nil || p.Type != StubPluginType {
				return false
			}
		}
		for _, d := range req.Deregister {
			if d.Type != StubPluginType {
				return false
			}
		}
		return len(req.Register)+len(req.Deregister) > 0
	}
	typ := req.Type // deregister, conditional-deregister
	if req.Plugin != nil {
		typ = req.Plugin.Type // register
	}
	return typ == StubPluginType
}
