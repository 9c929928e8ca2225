package fsm

import (
	"fmt"

	"github.com/plugreg/plugreg/api"
	"google.golang.org/protobuf/encoding/protowire"
)

// HostSyncCommand applies one host's anti-entropy writes
// (api.HostSyncRequest) in one entry: its registrations, each as its
// single registration (conditional on the owner with IfNodeID, as a
// ConditionalRegisterCommand), then its removals, each as a
// ConditionalDeregisterCommand on the host's node and, when set, the
// instance's ModifyIndex. A write its condition refuses is left alone and
// reported (ApplyResult.Refused); the others apply. A fleet's restart is
// then one entry per host rather than one per plugin.
//
// A new type, for the reason ConditionalRegisterCommand is one: binaries
// older than it refuse to apply it, so a server proposes one only while
// every server of the configuration says it knows it (cluster's
// rpcVersionHostSync); before that a host writes one entry per plugin.
// Like ConditionalRegisterCommand it has only a protobuf form
// (protocommand.go):
//
//	message HostSyncEntry {
//	  string node_id = 1;
//	  string if_node_id = 2;
//	  repeated pluginpb.PluginInfo register = 3;
//	  repeated HostDeregistration deregister = 4;
//	}
//	message HostDeregistration {
//	  string type = 1;
//	  string name = 2;
//	  string alloc_id = 3;
//	  uint64 if_modify_index = 6; // DeregisterEntry's numbers
//	}
//
// It carries no request ID: a repeat changes nothing that matters (a
// registration of the same content is unchanged, a removal already made
// is absent or refused by its ModifyIndex), and a request ID would
// answer a retry with the first attempt's refusals, which the state may
// no longer hold.
const HostSyncCommand CommandType = 14

// HostSyncRequest is a HostSyncCommand.
type HostSyncRequest struct {
	api.HostSyncRequest
	// IfNodeID, when set, is NodeID: the caller is bound to the node, and
	// a registration of an instance another node owns is refused.
	IfNodeID string `json:",omitempty"`
}

func (*HostSyncRequest) CommandType() CommandType { return HostSyncCommand }
func (*HostSyncRequest) ID() string               { return "" }

func (r *HostSyncRequest) Validate() error {
	if err := r.HostSyncRequest.Validate(); err != nil {
		return err
	}
	if r.IfNodeID != "" && r.IfNodeID != r.NodeID {
		return fmt.Errorf("%w: host sync of node %s conditional on node %q", api.ErrInvalid, r.NodeID, r.IfNodeID)
	}
	return nil
}

// ResultSynced answers a HostSyncRequest that changed at least one
// instance; one that changed none is api.ResultUnchanged.
const ResultSynced api.Result = "synced"

// hostSync applies r: the events of each write in order, the positions
// of those its conditions refused, and how many instances it removed.
func (s *State) hostSync(index uint64, r *HostSyncRequest) (api.Result, []Event, []int, int) {
	var (
		events  []Event
		refused []int
		removed int
	)
	for i, p := range r.Register {
		if r.IfNodeID != "" && s.CheckOwner(p, r.IfNodeID) != nil {
			refused = append(refused, i)
			continue
		}
		_, evs := s.register(index, p)
		events = append(events, evs...)
	}
	for i, d := range r.Deregister {
		c := &ConditionalDeregisterRequest{Type: d.Type, Name: d.Name, AllocID: d.AllocID, IfNodeID: r.NodeID, IfModifyIndex: d.IfModifyIndex}
		if s.checkCondition(c) != nil {
			refused = append(refused, len(r.Register)+i)
			continue
		}
		res, evs := s.deregister(index, d.Type, d.Name, d.AllocID)
		if res == api.ResultDeregistered {
			removed++
		}
		events = append(events, evs...)
	}
	if len(events) == 0 {
		return api.ResultUnchanged, nil, refused, 0
	}
	return ResultSynced, events, refused, removed
}

// Fields of a HostSyncEntry and of its HostDeregistration.
var (
	hostSyncFields = map[protowire.Number]protowire.Type{
		1: protowire.BytesType, 2: protowire.BytesType, 3: protowire.BytesType, 4: protowire.BytesType,
	}
	hostDeregisterFields = map[protowire.Number]protowire.Type{
		1: protowire.BytesType, 2: protowire.BytesType, 3: protowire.BytesType, 6: protowire.VarintType,
	}
)

func encodeHostSyncProto(r *HostSyncRequest) []byte {
	b := []byte{byte(HostSyncCommand)}
	for _, f := range []struct {
		num protowire.Number
		s   string
	}{{1, r.NodeID}, {2, r.IfNodeID}} {
		if f.s != "" {
			b = protowire.AppendTag(b, f.num, protowire.BytesType)
			b = protowire.AppendString(b, f.s)
		}
	}
	for _, p := range r.Register {
		b = appendPluginField(b, 3, p, 0)
	}
	for _, d := range r.Deregister {
		var m []byte
		for _, f := range []struct {
			num protowire.Number
			s   string
		}{{1, d.Type}, {2, d.Name}, {3, d.AllocID}} {
			m = protowire.AppendTag(m, f.num, protowire.BytesType)
			m = protowire.AppendString(m, f.s)
		}
		if d.IfModifyIndex != 0 {
			m = protowire.AppendTag(m, 6, protowire.VarintType)
			m = protowire.AppendVarint(m, d.IfModifyIndex)
		}
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendBytes(b, m)
	}
	return b
}

// decodeHostSyncProto decodes a HostSyncEntry. An entry of more than
// api.MaxHostSyncWrites writes is refused before any plugin is decoded:
// a hostile entry of a million empty plugins costs no million decodes.
func decodeHostSyncProto(body []byte) (*HostSyncRequest, error) {
	r := new(HostSyncRequest)
	var plugins, deregs [][]byte
	err := eachField(body, func(num protowire.Number, v []byte, _ uint64) {
		switch num {
		case 1:
			r.NodeID = string(v)
		case 2:
			r.IfNodeID = string(v)
		case 3:
			plugins = append(plugins, v)
		case 4:
			deregs = append(deregs, v)
		}
	}, hostSyncFields)
	if err != nil {
		return nil, err
	}
	if n := len(plugins) + len(deregs); n > api.MaxHostSyncWrites {
		return nil, fmt.Errorf("%d writes, at most %d", n, api.MaxHostSyncWrites)
	}
	for i, v := range plugins {
		p, err := decodePluginProto(v)
		if err != nil {
			return nil, fmt.Errorf("register %d: %w", i, err)
		}
		r.Register = append(r.Register, p)
	}
	for i, v := range deregs {
		var d api.HostDeregistration
		err := eachField(v, func(num protowire.Number, v []byte, n uint64) {
			switch num {
			case 1:
				d.Type = string(v)
			case 2:
				d.Name = string(v)
			case 3:
				d.AllocID = string(v)
			case 6:
				d.IfModifyIndex = n
			}
		}, hostDeregisterFields)
		if err != nil {
			return nil, fmt.Errorf("deregister %d: %w", i, err)
		}
		r.Deregister = append(r.Deregister, d)
	}
	return r, nil
}
