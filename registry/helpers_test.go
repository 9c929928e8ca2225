package registry

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
)

func plugin(ptype, name, alloc string) *api.PluginInfo {
	return &api.PluginInfo{
		Type: ptype, Name: name, AllocID: alloc, Version: "1", NodeID: "n1",
		ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/" + name + ".sock"},
	}
}

func newStore(t testing.TB, journalSize int) *Store {
	t.Helper()
	s := NewLocal(journalSize, nil)
	t.Cleanup(s.Shutdown)
	return s
}

func mustRegister(t testing.TB, s Registry, p *api.PluginInfo) api.WriteResult {
	t.Helper()
	res, err := s.RegisterPlugin(context.Background(), p)
	if err != nil {
		t.Fatalf("register: %v", err)
	}
	return res
}

// next receives one event or fails after a deadline.
func next(t testing.TB, ch <-chan *api.Event) *api.Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("channel closed")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	return nil
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
