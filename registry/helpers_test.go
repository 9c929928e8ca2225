package registry_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/tests/framework/localreg"
)

func plugin(ptype, name, alloc string) *api.PluginInfo {
	return &api.PluginInfo{
		Type: ptype, Name: name, AllocID: alloc, Version: "1", NodeID: "n1",
		ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/" + name + ".sock"},
	}
}

// newStore is a real registry of one process, whose hub is the one under
// test.
func newStore(t testing.TB, journalSize int) *localreg.Local {
	t.Helper()
	s := localreg.New(journalSize)
	t.Cleanup(s.Shutdown)
	return s
}

func mustRegister(t testing.TB, s *localreg.Local, p *api.PluginInfo) api.WriteResult {
	t.Helper()
	res, err := s.RegisterPlugin(context.Background(), p)
	if err != nil {
		t.Fatalf("register: %v", err)
	}
	return res
}

// next receives one event (a watch's or a delivery stream's) or fails
// after a deadline.
func next[E any](t testing.TB, ch <-chan E) E {
	t.Helper()
	var zero E
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("channel closed")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	return zero
}

// none asserts nothing arrives within a short grace period.
func none(t testing.TB, ch <-chan *api.Event) {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if ok {
			t.Fatalf("unexpected event %s at %d", ev.EventType, ev.Index)
		}
		t.Fatal("channel closed")
	case <-time.After(50 * time.Millisecond):
	}
}

func describe(ev *api.Event) string {
	switch ev.EventType {
	case api.EventReset:
		return fmt.Sprintf("reset@%d(%d)", ev.Index, len(ev.Plugins))
	case api.EventHeartbeat:
		return fmt.Sprintf("heartbeat@%d", ev.Index)
	}
	cur := "-"
	if ev.Current != nil {
		cur = ev.Current.AllocID
	}
	return fmt.Sprintf("%s:%s/%s/%s@%d>%s", ev.EventType, ev.Info.Type, ev.Info.Name, ev.Info.AllocID, ev.Index, cur)
}
