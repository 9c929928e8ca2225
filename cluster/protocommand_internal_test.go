package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/fsm"
)

// Registrations and deregistrations reach the log in protobuf only while
// every server of the configuration says it applies them; with a server
// that does not (here a non-voter gossip does not know, as an older
// release's server would be), in msgpack, which every release applies.
func TestProtoCommandsOnlyWhenEveryServerKnowsThem(t *testing.T) {
	s := soloServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := &api.PluginInfo{Type: "csi", Name: "ebs", AllocID: "a1", ConnectionInfo: &api.ConnectionInfo{Address: "x"}}
	entryType := func(t *testing.T, index uint64) fsm.CommandType {
		t.Helper()
		var l raft.Log
		if err := s.logs.GetLog(index, &l); err != nil {
			t.Fatalf("entry %d: %v", index, err)
		}
		return fsm.CommandType(l.Data[0])
	}
	writeBoth := func(t *testing.T, wantReg, wantDereg fsm.CommandType) {
		t.Helper()
		s.oldest.Store(nil) // what serverBelow remembers is a second old at most
		res, err := s.register(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if got := entryType(t, res.Index); got != wantReg {
			t.Errorf("registration written as %s, want %s", got, wantReg)
		}
		res, err = s.deregister(ctx, api.DeregisterRequest{Type: p.Type, Name: p.Name, AllocID: p.AllocID})
		if err != nil {
			t.Fatal(err)
		}
		if got := entryType(t, res.Index); got != wantDereg {
			t.Errorf("deregistration written as %s, want %s", got, wantDereg)
		}
	}
	writeBoth(t, fsm.RegisterProtoCommand, fsm.DeregisterProtoCommand)

	if err := s.raft.AddNonvoter("old", "127.0.0.1:1", 0, 10*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	writeBoth(t, fsm.RegisterCommand, fsm.DeregisterCommand)

	if err := s.raft.RemoveServer("old", 0, 10*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	writeBoth(t, fsm.RegisterProtoCommand, fsm.DeregisterProtoCommand)
}
