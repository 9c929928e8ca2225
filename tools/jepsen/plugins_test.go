package main

import (
	"testing"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/tools/jepsen/check"
)

// A stub's reset starts a new session from the highest index the previous
// one reached, so that the joined-sessions check sees no skip.
func TestStubPluginSessions(t *testing.T) {
	p := &stubPlugin{node: &node{Name: "c1"}, id: 6, clock: func() int64 { return 1 }}
	p.sess = check.Session{Subscriber: 6, Node: "c1", Types: []string{"t0"}, From: 10}
	info := &api.PluginInfo{Type: "t0", Name: "n0", AllocID: "a0", Version: "v"}
	for _, ev := range []*api.Event{
		{Index: 12, EventType: api.EventRegistered, Info: info, Current: info},
		{Index: 15, EventType: api.EventUpdated, Info: info, Current: info},
		{Index: 40, EventType: api.EventReset, Plugins: []*api.PluginInfo{info}},
		{Index: 41, EventType: api.EventDeregistered, Info: info},
	} {
		p.record(ev)
	}
	ss := p.recorded()
	if len(ss) != 2 {
		t.Fatalf("got %d sessions, want 2: %+v", len(ss), ss)
	}
	if s := ss[0]; s.From != 10 || len(s.Events) != 2 || s.EndReason != "reset" {
		t.Errorf("first session: from %d, %d events, ended %q; want from 10, 2 events, reset", s.From, len(s.Events), s.EndReason)
	}
	if s := ss[1]; s.Seq != 1 || s.From != 15 || len(s.Events) != 2 || s.Events[0].EventType != "reset" || s.Subscriber != 6 || len(s.Types) != 1 {
		t.Errorf("second session: %+v; want seq 1 from 15 (the first reached 15), starting with the reset, subscriber 6, types [t0]", s)
	}
}
