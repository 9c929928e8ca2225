package localreg

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/registry"
)

func TestReadsAndWrites(t *testing.T) {
	s := newStore(t, 0)
	ctx := context.Background()
	cases := []struct {
		name   string
		do     func() (api.WriteResult, error)
		result api.Result
		err    error
	}{
		{"register a1", func() (api.WriteResult, error) { return s.RegisterPlugin(ctx, plugin("csi", "ebs", "a1")) }, api.ResultRegistered, nil},
		{"register a2", func() (api.WriteResult, error) { return s.RegisterPlugin(ctx, plugin("csi", "ebs", "a2")) }, api.ResultRegistered, nil},
		{"register again", func() (api.WriteResult, error) { return s.RegisterPlugin(ctx, plugin("csi", "ebs", "a2")) }, api.ResultUnchanged, nil},
		{"register gce", func() (api.WriteResult, error) { return s.RegisterPlugin(ctx, plugin("csi", "gce", "g1")) }, api.ResultRegistered, nil},
		{"invalid never reaches the log", func() (api.WriteResult, error) { return s.RegisterPlugin(ctx, plugin("csi", "", "a1")) }, "", api.ErrInvalid},
		{"nil plugin", func() (api.WriteResult, error) { return s.RegisterPlugin(ctx, nil) }, "", api.ErrInvalid},
		{"deregister unknown", func() (api.WriteResult, error) { return s.DeregisterPlugin(ctx, "csi", "ebs", "zz") }, api.ResultAbsent, nil},
		{"deregister empty", func() (api.WriteResult, error) { return s.DeregisterPlugin(ctx, "csi", "", "a1") }, "", api.ErrInvalid},
		{"deregister node empty", func() (api.WriteResult, error) { return s.DeregisterNode(ctx, "") }, "", api.ErrInvalid},
	}
	var last uint64
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := tc.do()
			if !errors.Is(err, tc.err) {
				t.Fatalf("error %v, want %v", err, tc.err)
			}
			if err != nil {
				if _, idx := s.Types(); idx != last {
					t.Fatalf("a rejected write moved the index from %d to %d", last, idx)
				}
				return
			}
			if res.Result != tc.result || res.Index != last+1 {
				t.Fatalf("got %+v, want %s at %d", res, tc.result, last+1)
			}
			last = res.Index
		})
	}

	list, idx := s.ListPlugins("csi")
	if idx != last || len(list) != 2 || list[0].AllocID != "a2" || list[1].Name != "gce" {
		t.Fatalf("ListPlugins = %v at %d", list, idx)
	}
	inst, _ := s.Instances("csi", "ebs")
	if len(inst) != 2 || inst[0].AllocID != "a2" || inst[1].AllocID != "a1" {
		t.Fatalf("Instances = %v", inst)
	}
	if _, _, err := s.PluginForAlloc("csi", "ebs", "zz"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("PluginForAlloc unknown: %v", err)
	}
	p, _, err := s.PluginForAlloc("csi", "ebs", "a1")
	if err != nil || p.AllocID != "a1" {
		t.Fatalf("PluginForAlloc = %v, %v", p, err)
	}
	if types, _ := s.Types(); len(types) != 1 || types[0] != "csi" {
		t.Fatalf("Types = %v", types)
	}
}

// The registry hands out copies: changing what it returned changes nothing.
func TestHandsOutCopies(t *testing.T) {
	s := newStore(t, 0)
	in := plugin("csi", "ebs", "a1")
	in.Options = map[string]string{"k": "v"}
	mustRegister(t, s, in)
	in.Options["k"] = "caller"

	list, _ := s.ListPlugins("csi")
	list[0].Options["k"] = "list"
	inst, _ := s.Instances("csi", "ebs")
	inst[0].ConnectionInfo.SocketPath = "/x"
	got, _, _ := s.PluginForAlloc("csi", "ebs", "a1")
	if got.Options["k"] != "v" || got.ConnectionInfo.SocketPath != "/run/ebs.sock" {
		t.Fatalf("state was changed through a returned value: %+v %+v", got, got.ConnectionInfo)
	}
}

func TestShutdown(t *testing.T) {
	s := New(0)
	ctx := context.Background()
	var chans []<-chan *api.Event
	for i := 0; i < 10; i++ {
		ch, err := s.Watch(ctx, registry.Filter{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch)
	}
	chans = append(chans, s.PluginsUpdatedCh(ctx, "csi"))
	mustRegister(t, s, plugin("csi", "ebs", "a1")) // nobody reads: goroutines are blocked sending

	var wg sync.WaitGroup
	for i := 0; i < 3; i++ { // concurrent and repeated Shutdown must not panic
		wg.Add(1)
		go func() { defer wg.Done(); s.Shutdown() }()
	}
	wg.Wait()
	s.Shutdown()
	for _, ch := range chans {
		for range ch { // drain what was buffered; the loop ends only if closed
		}
	}
	if _, err := s.Watch(ctx, registry.Filter{}, 0); !errors.Is(err, registry.ErrShutdown) {
		t.Fatalf("Watch after Shutdown: %v", err)
	}
	if _, err := s.RegisterPlugin(ctx, plugin("csi", "ebs", "a2")); !errors.Is(err, registry.ErrShutdown) {
		t.Fatalf("write after Shutdown: %v", err)
	}
	if ch := s.PluginsUpdatedCh(ctx, "csi"); ch == nil {
		t.Fatal("nil channel after Shutdown")
	} else if _, ok := <-ch; ok {
		t.Fatal("PluginsUpdatedCh after Shutdown is not closed")
	}
}
