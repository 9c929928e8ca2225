package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/tests/framework/proctest"
)

// Three servers with -encrypt: a client agent with another key and one
// with none do not join (the servers never list them, they find no
// server to answer through); `plugreg keyring` rotates every agent to the
// other key under continuous writes, with no failed write and no member
// ever leaving, after which the agent that had the other key all along
// joins and the one with none still does not; a server restarted with its
// old -encrypt flag keeps the rotated keyring of its data dir and rejoins.
func TestGossipEncryptionAndRotation(t *testing.T) {
	bin := proctest.Build(t, "./cmd/plugreg")
	keygen := func() string {
		out, err := exec.Command(bin, "keygen").Output()
		if err != nil {
			t.Fatalf("keygen: %v", err)
		}
		return strings.TrimSpace(string(out))
	}
	oldKey, newKey := keygen(), keygen()
	if oldKey == newKey || len(oldKey) != 44 {
		t.Fatalf("keygen: %q and %q", oldKey, newKey)
	}
	c := proctest.StartCluster(t, proctest.ClusterConfig{Bin: bin, ServerArgs: []string{"-encrypt", oldKey}})
	good := c.StartClient(t, "host-good", "127.0.0.1", "-encrypt", oldKey, "-plugin-socket", "off")
	c.WaitReady(t)
	future := c.StartClient(t, "host-newkey", "127.0.0.1", "-encrypt", newKey, "-plugin-socket", "off")
	plain := c.StartClient(t, "host-plain", "127.0.0.1", "-plugin-socket", "off")

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	members := func() map[string]string {
		ms, err := c.Servers[0].API.Members(ctx)
		if err != nil {
			t.Fatalf("members: %v", err)
		}
		out := map[string]string{}
		for _, m := range ms {
			out[m.Name] = m.Status
		}
		return out
	}
	// Both outsiders try to join every second (-retry-join) and log why
	// they cannot; give them a few tries.
	c.Poll(t, "the outsiders' join attempts refused", func() (bool, string) {
		for _, a := range []*proctest.Agent{future, plain} {
			if !strings.Contains(a.Log(), "join failed") {
				return false, a.Name + " has not failed to join yet"
			}
		}
		return true, ""
	})
	time.Sleep(3 * time.Second)
	ms := members()
	for _, a := range []*proctest.Agent{future, plain} {
		if st, ok := ms[a.Name]; ok {
			t.Fatalf("%s (wrong or no key) is a member: %s", a.Name, st)
		}
		if own, err := a.API.Members(ctx); err != nil || len(own) != 1 {
			t.Fatalf("%s's members: %v, %v; want itself alone", a.Name, own, err) // up, just alone
		}
		// The Go client waits for a server to appear; give it 3 s.
		rctx, rcancel := context.WithTimeout(ctx, 3*time.Second)
		_, _, err := a.API.List(rctx, "csi", nil)
		rcancel()
		if err == nil {
			t.Fatalf("%s answered a read without reaching a server", a.Name)
		}
	}
	if ms[good.Name] != "alive" || len(ms) != 4 {
		t.Fatalf("members %v; want the servers and %s", ms, good.Name)
	}

	// Continuous writes through the client agent while the keys rotate.
	var written, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
			p := &api.PluginInfo{Type: "csi", Name: "ebs", AllocID: fmt.Sprintf("a%d", i%50), ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/ebs.sock"}}
			_, err := good.API.Register(wctx, p)
			wcancel()
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
			} else {
				written.Add(1)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	keyring := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"keyring", "-addr", c.Servers[1].HTTP}, args...)...)
		cmd.Env = []string{}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("keyring %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	refused := func(want string, args ...string) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"keyring", "-addr", c.Servers[1].HTTP}, args...)...)
		cmd.Env = []string{}
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), want) {
			t.Fatalf("keyring %v: %v\n%s\nwant a refusal saying %q", args, err, out, want)
		}
	}
	if out := keyring("-list"); !strings.Contains(out, oldKey+"  4/4") {
		t.Fatalf("keyring -list before the rotation:\n%s", out)
	}
	refused("install it everywhere first", "-use", newKey)
	refused("must have 16, 24 or 32", "-install", "bm90IGEga2V5")
	keyring("-install", newKey)
	refused("primary key", "-remove", oldKey)
	keyring("-use", newKey)
	keyring("-remove", oldKey)
	out := keyring("-list")
	// 4/4, or 5/5 once the agent that had the new key all along has
	// joined (it may, as soon as the servers encrypt with it).
	if !regexp.MustCompile(regexp.QuoteMeta(newKey)+`\s+(4/4\s+4|5/5\s+5)\s*$`).MatchString(out) || strings.Contains(out, oldKey) {
		t.Fatalf("keyring -list after the rotation:\n%s", out)
	}
	time.Sleep(2 * time.Second) // writes go on under the new key alone
	close(stop)
	wg.Wait()
	if failed.Load() != 0 || written.Load() == 0 {
		t.Fatalf("during the rotation: %d writes, %d failed (first: %v)", written.Load(), failed.Load(), firstErr.Load())
	}
	t.Logf("%d writes through the rotation, none failed", written.Load())
	// The servers and the agent that took part stayed alive throughout
	// (no write failed); one that had only the new key may have been
	// suspected while some still encrypted with the old: wait for it.
	c.Poll(t, "every member alive after the rotation", func() (bool, string) {
		for name, st := range members() {
			if st != "alive" {
				return false, name + " " + st
			}
		}
		return true, ""
	})

	// The agent that had the new key all along joins now; the plaintext
	// one still does not.
	c.Poll(t, "the new key's agent joining", func() (bool, string) {
		ms := members()
		return ms[future.Name] == "alive", fmt.Sprint(ms)
	})
	if _, _, err := future.API.List(ctx, "csi", nil); err != nil {
		t.Fatalf("%s, joined, reads: %v", future.Name, err)
	}
	if st, ok := members()[plain.Name]; ok {
		t.Fatalf("%s (no key) is a member after the rotation: %s", plain.Name, st)
	}

	// A server restarted with its old flag uses the keyring in its data
	// dir (the flag only seeds a new one) and rejoins.
	s := c.Servers[2]
	if _, ok := s.Stop(t); !ok {
		t.FailNow()
	}
	s.Start(t)
	c.Poll(t, s.Name+" rejoining under the rotated key", func() (bool, string) {
		ms := members()
		return ms[s.Name] == "alive" && strings.Contains(s.Log(), "the keyring is used"), fmt.Sprint(ms)
	})
	c.Poll(t, s.Name+" back in Raft", func() (bool, string) {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		defer rcancel()
		l, _, err := s.API.List(rctx, "csi", nil)
		return err == nil && len(l) == 1, fmt.Sprint(l, err)
	})
}
