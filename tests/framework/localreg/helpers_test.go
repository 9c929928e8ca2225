package localreg

import (
	"context"
	"testing"

	"github.com/plugreg/plugreg/api"
	"go.uber.org/goleak"
)

// Every test in this package must leave no goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func plugin(ptype, name, alloc string) *api.PluginInfo {
	return &api.PluginInfo{
		Type: ptype, Name: name, AllocID: alloc, Version: "1", NodeID: "n1",
		ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/" + name + ".sock"},
	}
}

func newStore(t testing.TB, journalSize int) *Local {
	t.Helper()
	s := New(journalSize)
	t.Cleanup(s.Shutdown)
	return s
}

func mustRegister(t testing.TB, s *Local, p *api.PluginInfo) api.WriteResult {
	t.Helper()
	res, err := s.RegisterPlugin(context.Background(), p)
	if err != nil {
		t.Fatalf("register: %v", err)
	}
	return res
}
