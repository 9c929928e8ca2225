package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/cluster"
	"github.com/plugreg/plugreg/internal/datadir"
	"github.com/plugreg/plugreg/tests/framework/proctest"
)

// Servers that snapshot soon, so that a recovery finds a snapshot and log
// entries after it (RecoverCluster restores the one and applies the
// other): 150 writes make one snapshot, at an index between 128 and a
// little over 150, and 10 more make none.
var recoveryServerArgs = []string{"-snapshot-threshold", "128", "-snapshot-interval", "300ms", "-trailing-logs", "32"}

// The outage recovery of docs/operations.md with one survivor: three
// servers take acknowledged writes, all three are killed -9, two data dirs
// are wiped, and the survivor (the most advanced per operator raft
// inspect) is started with a peers.json naming only itself. It elects
// itself and serves every write; two fresh servers join it (-retry-join),
// all three converge, hold every write and take new ones; peers.json is
// gone.
func TestOutageRecoveryFromOneSurvivor(t *testing.T) {
	if testing.Short() {
		t.Skip("processes, kills every server")
	}
	bin := proctest.Build(t, "./cmd/plugreg")
	for _, store := range []string{cluster.LogStoreWAL, cluster.LogStoreBolt} {
		t.Run(store, func(t *testing.T) { testRecoveryFromOneSurvivor(t, bin, store) })
	}
}

func testRecoveryFromOneSurvivor(t *testing.T, bin, logStore string) {
	c := proctest.StartCluster(t, proctest.ClusterConfig{Bin: bin, ServerArgs: append(slices.Clone(recoveryServerArgs), "-log-store", logStore)})
	c.WaitReady(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	acked, last := writeRecoveryPlugins(ctx, t, c.Servers[0].API, "before", 150)
	waitAllApplied(ctx, t, c, c.Servers, last)
	addrs := raftAddrs(ctx, t, c.Servers[0].API)
	c.Poll(t, "a snapshot in every data dir", func() (bool, string) {
		for _, s := range c.Servers {
			if m, _ := filepath.Glob(filepath.Join(s.DataDir, "snapshots", "*", "meta.json")); len(m) == 0 {
				return false, s.Name + " has none yet"
			}
		}
		return true, ""
	})
	// And entries after it.
	more, last := writeRecoveryPlugins(ctx, t, c.Servers[0].API, "more", 10)
	waitAllApplied(ctx, t, c, c.Servers, last)

	// A live agent's data dir is refused, and waits for nothing.
	if out, err := runCLI(bin, "operator", "raft", "inspect", "-data-dir", c.Servers[0].DataDir); err == nil || !strings.Contains(out, "in use by a running agent") {
		t.Fatalf("inspect of a live agent's data dir: %v\n%s", err, out)
	}

	for _, s := range c.Servers {
		s.Kill9(t)
	}
	// The operator's pick: the highest last term, then last index.
	var survivor *proctest.Agent
	var best cluster.DataDirState
	for _, s := range c.Servers {
		st := inspectDir(t, bin, s.DataDir)
		t.Logf("%s: last index %d term %d, snapshot %+v, log %d-%d, %d servers", s.Name, st.LastIndex, st.LastTerm, st.Snapshot, st.FirstLogIndex, st.LastLogIndex, len(st.Configuration))
		if st.NodeID != s.Name || st.LogStore != logStore || st.LastIndex < last || len(st.Configuration) != 3 || st.Snapshot == nil || st.LastLogIndex <= st.Snapshot.Index {
			t.Fatalf("%s: inspect says %+v; want its node ID, its log store, a last index of at least %d, three servers, a snapshot and entries after it", s.Name, st, last)
		}
		if survivor == nil || st.LastTerm > best.LastTerm || st.LastTerm == best.LastTerm && st.LastIndex > best.LastIndex {
			survivor, best = s, st
		}
	}
	var lost []*proctest.Agent
	for _, s := range c.Servers {
		if s != survivor {
			lost = append(lost, s)
			if err := os.RemoveAll(s.DataDir); err != nil {
				t.Fatal(err)
			}
		}
	}
	peersFile := writePeersJSON(t, survivor.DataDir, survivor.Name, addrs[survivor.Name])
	t.Logf("recovering from %s (last index %d), %s and %s wiped", survivor.Name, best.LastIndex, lost[0].Name, lost[1].Name)
	survivor.Start(t)
	c.Poll(t, survivor.Name+" leading alone", func() (bool, string) {
		l, err := survivor.API.Leader(ctx)
		return err == nil && l == addrs[survivor.Name], fmt.Sprintf("leader %q, %v", l, err)
	})
	checkPlugins(ctx, t, survivor, "before", acked, 0)
	checkPlugins(ctx, t, survivor, "more", more, 0)
	if _, err := os.Stat(peersFile); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("peers.json after the recovery: %v; want it removed", err)
	}
	if log := survivor.Log(); !strings.Contains(log, "RECOVERED the Raft configuration from peers.json") {
		t.Fatal("the survivor's log does not say it recovered")
	}

	// Two fresh servers (wiped data dirs, same flags: -retry-join).
	for _, s := range lost {
		s.Start(t)
	}
	c.Poll(t, "three healthy voters", func() (bool, string) {
		h, err := survivor.API.AutopilotHealth(ctx)
		if err != nil {
			return false, err.Error()
		}
		return h.Healthy && len(h.Servers) == 3 && h.FailureTolerance == 1, fmt.Sprintf("%+v", h)
	})
	after, last := writeRecoveryPlugins(ctx, t, lost[0].API, "after", 20)
	waitAllApplied(ctx, t, c, c.Servers, last)
	for _, s := range c.Servers {
		checkPlugins(ctx, t, s, "before", acked, last)
		checkPlugins(ctx, t, s, "more", more, last)
		checkPlugins(ctx, t, s, "after", after, last)
	}
}

// A survivor that lagged loses what the others acknowledged after it fell
// behind, and operator raft inspect shows it: its last index is lower.
// This is the loss docs/operations.md warns of, and why the survivor to
// pick is the most advanced.
func TestOutageRecoveryFromLaggingSurvivorLosesLaterWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("processes, kills every server")
	}
	bin := proctest.Build(t, "./cmd/plugreg")
	c := proctest.StartCluster(t, proctest.ClusterConfig{Bin: bin, ServerArgs: recoveryServerArgs})
	c.WaitReady(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	addrs := raftAddrs(ctx, t, c.Servers[0].API)
	acked, last := writeRecoveryPlugins(ctx, t, c.Servers[0].API, "before", 100)
	waitAllApplied(ctx, t, c, c.Servers, last)
	_, follower := leaderAndFollower(t, c)
	follower.Kill9(t)
	var rest []*proctest.Agent
	for _, s := range c.Servers {
		if s != follower {
			rest = append(rest, s)
		}
	}
	later, laterLast := writeRecoveryPlugins(ctx, t, rest[0].API, "later", 50)
	waitAllApplied(ctx, t, c, rest, laterLast)
	// Quorum lost with one server still running: list-peers through it
	// shows its last index, with no leader (docs/operations.md).
	rest[1].Kill9(t)
	c.Poll(t, "list-peers through the last running server", func() (bool, string) {
		cmd := exec.Command(bin, "operator", "raft", "list-peers", "-json", "-addr", rest[0].HTTP)
		out, err := cmd.Output()
		var h api.AutopilotHealth
		if jerr := json.Unmarshal(out, &h); err == nil || jerr != nil {
			return false, fmt.Sprintf("exit %v (want 1: unhealthy), %v: %s", err, jerr, out)
		}
		for _, sh := range h.Servers {
			if sh.ID == rest[0].Name {
				return sh.LastIndex >= laterLast && !h.Healthy && h.Leader == "", fmt.Sprintf("%+v", h)
			}
		}
		return false, string(out)
	})
	rest[0].Kill9(t)
	lag := inspectDir(t, bin, follower.DataDir)
	for _, s := range rest {
		st := inspectDir(t, bin, s.DataDir)
		if st.LastIndex < laterLast || lag.LastIndex >= st.LastIndex {
			t.Fatalf("inspect: %s at %d, the lagging %s at %d; want %s at %d or more, ahead of %s", s.Name, st.LastIndex, follower.Name, lag.LastIndex, s.Name, laterLast, follower.Name)
		}
	}
	t.Logf("the lagging %s is at %d; the acknowledged writes reached %d", follower.Name, lag.LastIndex, laterLast)

	// Recovering from the lagging one anyway: the later writes, acknowledged
	// to the client, are gone; the earlier ones are there.
	writePeersJSON(t, follower.DataDir, follower.Name, addrs[follower.Name])
	follower.Start(t)
	c.Poll(t, follower.Name+" leading alone", func() (bool, string) {
		l, err := follower.API.Leader(ctx)
		return err == nil && l == addrs[follower.Name], fmt.Sprintf("leader %q, %v", l, err)
	})
	checkPlugins(ctx, t, follower, "before", acked, 0)
	got, _, err := follower.API.List(ctx, "later", nil)
	if err != nil && !errors.Is(err, api.ErrNotFound) {
		t.Fatal(err)
	}
	t.Logf("of %d acknowledged later writes, %d survived the recovery from the lagging server", len(later), len(got))
	if len(got) != 0 {
		t.Fatalf("%d later writes are on the lagging server: it did not lag", len(got))
	}
}

// Consul's other use: every server killed, none lost, and each started
// with a peers.json naming all three: on the same addresses, and on new
// server ports (servers that moved, whose Raft configuration names
// addresses nobody listens on any more: without the recovery no leader is
// ever elected). They elect a leader, hold every acknowledged write, take
// new ones, and every peers.json is gone.
func TestOutageRecoveryAllServersKept(t *testing.T) {
	if testing.Short() {
		t.Skip("processes, kills every server")
	}
	bin := proctest.Build(t, "./cmd/plugreg")
	for _, moved := range []bool{false, true} {
		t.Run(map[bool]string{false: "same addresses", true: "new server ports"}[moved], func(t *testing.T) {
			c := proctest.StartCluster(t, proctest.ClusterConfig{Bin: bin, ServerArgs: recoveryServerArgs})
			c.WaitReady(t)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			acked, last := writeRecoveryPlugins(ctx, t, c.Servers[1].API, "before", 200)
			waitAllApplied(ctx, t, c, c.Servers, last)
			addrs := raftAddrs(ctx, t, c.Servers[0].API)
			for _, s := range c.Servers {
				s.Kill9(t)
			}
			if moved {
				ports := proctest.FreePorts(t, "127.0.0.1", len(c.Servers))
				for i, s := range c.Servers {
					s.Args[slices.Index(s.Args, "-server-port")+1] = fmt.Sprint(ports[i])
					addrs[s.Name] = fmt.Sprintf("127.0.0.1:%d", ports[i])
				}
			}
			var entries []string
			for _, s := range c.Servers {
				entries = append(entries, fmt.Sprintf(`{"id": %q, "address": %q, "non_voter": false}`, s.Name, addrs[s.Name]))
			}
			list := "[\n  " + strings.Join(entries, ",\n  ") + "\n]\n"
			for _, s := range c.Servers {
				if err := os.WriteFile(filepath.Join(s.DataDir, cluster.PeersFileName), []byte(list), 0o600); err != nil {
					t.Fatal(err)
				}
				s.Start(t)
			}
			c.WaitReady(t)
			after, last := writeRecoveryPlugins(ctx, t, c.Servers[2].API, "after", 20)
			waitAllApplied(ctx, t, c, c.Servers, last)
			for _, s := range c.Servers {
				checkPlugins(ctx, t, s, "before", acked, last)
				checkPlugins(ctx, t, s, "after", after, last)
				if _, err := os.Stat(filepath.Join(s.DataDir, cluster.PeersFileName)); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("%s: peers.json after the recovery: %v; want it removed", s.Name, err)
				}
			}
			c.Poll(t, "three healthy voters at the file's addresses", func() (bool, string) {
				h, err := c.Servers[0].API.AutopilotHealth(ctx)
				if err != nil || !h.Healthy || len(h.Servers) != 3 {
					return false, fmt.Sprintf("%+v %v", h, err)
				}
				for _, sh := range h.Servers {
					if addrs[sh.ID] != sh.Address {
						return false, fmt.Sprintf("%s at %s; want %s", sh.ID, sh.Address, addrs[sh.ID])
					}
				}
				return true, ""
			})
		})
	}
}

// The hazard of recovering with every server kept when their logs differ
// (docs/operations.md): a leader cut off from its followers (here: they
// are stopped with SIGSTOP) appends writes it can never commit, and is
// killed; the followers elect a new leader and commit fewer entries than
// that tail before everything is killed. With a peers.json naming all
// three, each server applies its own tail: the old leader's state ends
// beyond the new leader's snapshot, which its FSM refuses as older than
// its state, again at every retry. list-peers shows its last index above
// the leader's, and autopilot calls it unhealthy, with why, and the
// failure tolerance 0: it acknowledges nothing (with the third server
// down, no write commits). The documented remedy
// (stop it, empty its data dir, start it) brings it back with every
// acknowledged write, and every server then holds the same.
func TestOutageRecoveryAllServersDeposedLeaderTail(t *testing.T) {
	if testing.Short() {
		t.Skip("processes, kills every server")
	}
	bin := proctest.Build(t, "./cmd/plugreg")
	c := proctest.StartCluster(t, proctest.ClusterConfig{Bin: bin})
	c.WaitReady(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	acked, last := writeRecoveryPlugins(ctx, t, c.Servers[0].API, "before", 20)
	waitAllApplied(ctx, t, c, c.Servers, last)
	addrs := raftAddrs(ctx, t, c.Servers[0].API)
	old, _ := leaderAndFollower(t, c)
	var followers []*proctest.Agent
	for _, s := range c.Servers {
		if s != old {
			followers = append(followers, s)
		}
	}
	cont := func() {
		for _, f := range followers {
			f.Resume()
		}
	}
	t.Cleanup(cont) // before the cluster's: a stopped process ignores SIGTERM
	for _, f := range followers {
		f.Pause(t)
	}
	// Writes the cut-off leader appends and cannot commit: none may be
	// acknowledged.
	var wg sync.WaitGroup
	var ackedTail atomic.Int32
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wctx, wcancel := context.WithTimeout(ctx, 3*time.Second)
			defer wcancel()
			name := fmt.Sprintf("t%02d", i)
			if _, err := old.API.Register(wctx, &api.PluginInfo{Type: "tail", Name: name, AllocID: "a", ConnectionInfo: &api.ConnectionInfo{SocketPath: "/s"}}); err == nil {
				ackedTail.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := ackedTail.Load(); n > 0 {
		t.Fatalf("%d writes acknowledged by a leader cut off from both followers", n)
	}
	old.Kill9(t)
	cont()
	var leader *proctest.Agent
	c.Poll(t, "a new leader among the followers", func() (bool, string) {
		l, err := followers[0].API.Leader(ctx)
		for _, f := range followers {
			if l == addrs[f.Name] {
				leader = f
			}
		}
		return leader != nil, fmt.Sprintf("leader %q, %v", l, err)
	})
	more, last := writeRecoveryPlugins(ctx, t, leader.API, "more", 3)
	waitAllApplied(ctx, t, c, followers, last)
	for _, f := range followers {
		f.Kill9(t)
	}
	oldSt, newSt := inspectDir(t, bin, old.DataDir), inspectDir(t, bin, leader.DataDir)
	t.Logf("old leader %s: last index %d term %d; new leader %s: last index %d term %d", old.Name, oldSt.LastIndex, oldSt.LastTerm, leader.Name, newSt.LastIndex, newSt.LastTerm)
	if oldSt.LastTerm >= newSt.LastTerm || oldSt.LastIndex <= newSt.LastIndex {
		t.Fatalf("want the old leader's log longer and of an older term than the new leader's")
	}

	var entries []string
	for _, s := range c.Servers {
		entries = append(entries, fmt.Sprintf(`{"id": %q, "address": %q}`, s.Name, addrs[s.Name]))
	}
	for _, s := range c.Servers {
		if err := os.WriteFile(filepath.Join(s.DataDir, cluster.PeersFileName), []byte("["+strings.Join(entries, ",")+"]"), 0o600); err != nil {
			t.Fatal(err)
		}
		s.Start(t)
	}
	c.Poll(t, "a leader", func() (bool, string) {
		l, err := leader.API.Leader(ctx)
		return err == nil && l != "" && l != addrs[old.Name], fmt.Sprintf("leader %q, %v", l, err)
	})
	// The old leader stays behind: it refuses the leader's snapshot, again
	// at every retry. What an operator sees in list-peers: its last index
	// above the leader's, which a follower's never stays. It hears the
	// leader's heartbeats, in the leader's term, and its log is not behind
	// the leader's; autopilot calls it unhealthy all the same (its state is
	// ahead of the leader's log, its restores fail), and says why.
	refusal := "snapshot is older than the applied state; refused"
	c.Poll(t, old.Name+" refusing the leader's snapshot twice", func() (bool, string) {
		return strings.Count(old.Log(), refusal) >= 2, ""
	})
	h, err := leader.API.AutopilotHealth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var oldIdx, leaderIdx uint64
	oldH := h.Servers[0]
	for _, sh := range h.Servers {
		switch sh.ID {
		case old.Name:
			oldIdx, oldH = sh.LastIndex, sh
		case h.Leader:
			leaderIdx = sh.LastIndex
		}
	}
	if oldIdx != oldSt.LastIndex || oldIdx <= leaderIdx {
		t.Fatalf("list-peers: %s at %d, the leader at %d; want %s still at its recovered %d, above the leader", old.Name, oldIdx, leaderIdx, old.Name, oldSt.LastIndex)
	}
	t.Logf("%s stuck at %d (the leader at %d): %+v", old.Name, oldIdx, leaderIdx, h)
	if oldH.Healthy || !strings.Contains(oldH.Reason, "failed to install the leader's snapshot") || !strings.Contains(oldH.Reason, refusal) {
		t.Errorf("autopilot on %s: healthy %v, reason %q; want unhealthy: it failed to install the leader's snapshots (%s)", old.Name, oldH.Healthy, oldH.Reason, refusal)
	}
	if oldH.AppliedIndex > leaderIdx && !strings.Contains(oldH.Reason, "ahead of the leader's log") {
		t.Errorf("autopilot on %s: applied index %d, the leader's last index %d, reason %q; want it ahead of the leader's log", old.Name, oldH.AppliedIndex, leaderIdx, oldH.Reason)
	}
	for _, sh := range h.Servers {
		if sh.ID != old.Name && (!sh.Healthy || sh.Reason != "") {
			t.Errorf("autopilot on %s: healthy %v, reason %q; want healthy", sh.ID, sh.Healthy, sh.Reason)
		}
	}
	if h.Healthy || h.FailureTolerance != 0 {
		t.Errorf("autopilot: healthy %v, failure tolerance %d; want unhealthy, 0", h.Healthy, h.FailureTolerance)
	}
	out, err := exec.Command(bin, "operator", "raft", "list-peers", "-addr", leader.HTTP).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "failure tolerance: 0") || !strings.Contains(string(out), "failed to install the leader's snapshot") {
		t.Errorf("list-peers: exit %v (want 1), want failure tolerance 0 and why %s is unhealthy:\n%s", err, old.Name, out)
	}
	t.Logf("list-peers:\n%s", out)
	// And it acknowledges nothing: with the other follower down, no write
	// commits, as the failure tolerance of 0 says.
	var now, other *proctest.Agent
	for _, s := range c.Servers {
		switch {
		case s.Name == h.Leader:
			now = s
		case s != old:
			other = s
		}
	}
	other.Kill9(t)
	pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
	_, err = now.API.Register(pctx, &api.PluginInfo{Type: "probe", Name: "p", AllocID: "a", ConnectionInfo: &api.ConnectionInfo{SocketPath: "/s"}})
	pcancel()
	if err == nil {
		t.Fatalf("a write committed with %s down: %s acknowledges entries after all", other.Name, old.Name)
	}
	t.Logf("with %s down, a write through the leader: %v", other.Name, err)
	other.Start(t)

	// The remedy: stop it, empty its data dir, start it.
	if _, ok := old.Stop(t); !ok {
		t.FailNow()
	}
	if err := os.RemoveAll(old.DataDir); err != nil {
		t.Fatal(err)
	}
	old.Start(t)
	c.Poll(t, "three healthy voters", func() (bool, string) {
		h, err := leader.API.AutopilotHealth(ctx)
		return err == nil && h.Healthy && len(h.Servers) == 3, fmt.Sprintf("%+v %v", h, err)
	})
	after, last := writeRecoveryPlugins(ctx, t, old.API, "after", 5)
	waitAllApplied(ctx, t, c, c.Servers, last)
	// The tail the followers had received before they were stopped was
	// committed by the new leader (never acknowledged, it is there now:
	// plain Raft); the rest of it, only in the old leader's wiped state,
	// is gone. Every server holds the same.
	tails := map[string][]string{}
	for _, s := range c.Servers {
		checkPlugins(ctx, t, s, "before", acked, last)
		checkPlugins(ctx, t, s, "more", more, last)
		checkPlugins(ctx, t, s, "after", after, last)
		l, _, err := s.API.List(ctx, "tail", &client.QueryOptions{Stale: true})
		if err != nil && !errors.Is(err, api.ErrNotFound) {
			t.Fatal(err)
		}
		for _, p := range l {
			tails[s.Name] = append(tails[s.Name], p.Name)
		}
	}
	if !slices.Equal(tails[c.Servers[0].Name], tails[c.Servers[1].Name]) || !slices.Equal(tails[c.Servers[1].Name], tails[c.Servers[2].Name]) {
		t.Fatalf("the servers differ on the cut-off leader's writes: %v", tails)
	}
	t.Logf("of the 40 unacknowledged writes, %d are in the cluster (the followers had received them)", len(tails[old.Name]))
}

// Every bad peers.json stops the start with one line that names the file
// and what to do; the file stays and the data dir is as it was. Then a
// good one recovers.
func TestPeersJSONRefused(t *testing.T) {
	bin := proctest.Build(t, "./cmd/plugreg")
	c := proctest.StartCluster(t, proctest.ClusterConfig{Bin: bin, ServerIPs: []string{"127.0.0.1"}})
	c.WaitReady(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := c.Servers[0]
	acked, _ := writeRecoveryPlugins(ctx, t, s.API, "before", 5)
	addrs := raftAddrs(ctx, t, s.API)
	self := addrs[s.Name]
	if _, ok := s.Stop(t); !ok {
		t.FailNow()
	}
	entry := func(id, addr string) string {
		return fmt.Sprintf(`{"id": %q, "address": %q, "non_voter": false}`, id, addr)
	}
	cases := []struct{ name, json, want string }{
		{"malformed", `[` + entry(s.Name, self), "not a JSON list"},
		{"empty", `[]`, "the list is empty"},
		{"duplicate id", `[` + entry(s.Name, self) + `,` + entry(s.Name, "127.0.0.2:7300") + `]`, "listed twice"},
		{"duplicate address", `[` + entry(s.Name, self) + `,` + entry("other", self) + `]`, "listed twice"},
		{"missing id", `[{"address": "` + self + `"}]`, `has no "id"`},
		{"missing address", `[{"id": "` + s.Name + `"}]`, `has no "address"`},
		{"address does not parse", `[` + entry(s.Name, "127.0.0.1") + `]`, "want IP:PORT"},
		{"host name", `[` + entry(s.Name, "localhost:7300") + `]`, "is not an IP address"},
		{"own node ID missing", `[` + entry("other", self) + `]`, "does not name this server's node ID"},
		{"own address wrong", `[` + entry(s.Name, "127.0.0.1:1") + `]`, "but this server listens on " + self},
	}
	path := filepath.Join(s.DataDir, cluster.PeersFileName)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(path, []byte(tc.json), 0o600); err != nil {
				t.Fatal(err)
			}
			refusedStart(t, s.Proc, s.DataDir, path, tc.want)
		})
	}
	t.Run("data dir without a log", func(t *testing.T) {
		// peers.json put in a wiped server's data dir.
		dir := filepath.Join(c.Dir, "wiped")
		os.MkdirAll(dir, 0o700)
		os.WriteFile(filepath.Join(dir, "node-id"), []byte(s.Name+"\n"), 0o640)
		wpath := filepath.Join(dir, cluster.PeersFileName)
		os.WriteFile(wpath, []byte(`[`+entry(s.Name, self)+`]`), 0o600)
		args := slices.Clone(s.Args)
		args[slices.Index(args, "-data-dir")+1] = dir
		p := proctest.New("wiped", bin, filepath.Join(c.Dir, "wiped.log"), args...)
		refusedStart(t, p, dir, wpath, "holds no Raft log")
	})

	if err := os.WriteFile(path, []byte(`[`+entry(s.Name, self)+`]`), 0o600); err != nil {
		t.Fatal(err)
	}
	s.Start(t)
	c.WaitReady(t)
	checkPlugins(ctx, t, s, "before", acked, 0)
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("peers.json after the recovery: %v; want it removed", err)
	}
}

// refusedStart starts p (an agent whose data dir holds the bad file at
// path) and checks that it exits 1 with one line about the file, leaving
// the file and the data dir as they were.
func refusedStart(t *testing.T, p *proctest.Proc, dataDir, path, want string) {
	t.Helper()
	before := dirState(t, dataDir)
	logSize := int64(0)
	if fi, err := os.Stat(p.LogPath); err == nil {
		logSize = fi.Size()
	}
	p.Start(t)
	if st := p.WaitExit(t, 30*time.Second); st.ExitCode() != 1 {
		t.Fatalf("exit %v; want 1", st)
	}
	b, _ := os.ReadFile(p.LogPath)
	var lines []string
	for l := range strings.SplitSeq(string(b[logSize:]), "\n") {
		if strings.Contains(l, cluster.PeersFileName) {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], path) || !strings.Contains(lines[0], want) ||
		!strings.Contains(lines[0], "nothing in the data dir was changed and the file was kept") {
		t.Fatalf("want one line naming %s with %q and the remedy; the run's lines about peers.json:\n%s\nits output:\n%s", path, want, strings.Join(lines, "\n"), b[logSize:])
	}
	t.Logf("refused: %s", lines[0])
	if after := dirState(t, dataDir); !maps.Equal(before, after) {
		t.Fatalf("the data dir changed:\nbefore %v\nafter  %v", before, after)
	}
}

// dirState is every file and directory under dir: mode, size, mtime and
// content hash; but the data dir's lock, which each start takes (made if
// missing) and writes its pid into.
func dirState(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path == filepath.Join(dir, datadir.LockName) {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		v := fmt.Sprintf("%v %d %d", fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
		if path == dir {
			v = fi.Mode().String() // the lock's creation changes its time
		}
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			v += fmt.Sprintf(" %x", sha256.Sum256(b))
		}
		out[path] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// writeRecoveryPlugins registers n plugins of type typ through c, one
// acknowledged write each, and returns their names and the last index.
func writeRecoveryPlugins(ctx context.Context, t *testing.T, c *client.Client, typ string, n int) ([]string, uint64) {
	t.Helper()
	var names []string
	var last uint64
	for i := range n {
		name := fmt.Sprintf("p%04d", i)
		w, err := c.Register(ctx, &api.PluginInfo{Type: typ, Name: name, AllocID: "a", ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/" + name + ".sock"}})
		if err != nil {
			t.Fatalf("write %s/%s: %v", typ, name, err)
		}
		names, last = append(names, name), w.Index
	}
	return names, last
}

// waitAllApplied waits until each of servers has applied index.
func waitAllApplied(ctx context.Context, t *testing.T, c *proctest.Cluster, servers []*proctest.Agent, index uint64) {
	t.Helper()
	c.Poll(t, fmt.Sprintf("every server at index %d", index), func() (bool, string) {
		for _, s := range servers {
			_, m, err := s.API.List(ctx, "proctest-ready", &client.QueryOptions{Stale: true})
			if err != nil && !errors.Is(err, api.ErrNotFound) {
				return false, s.Name + ": " + err.Error()
			}
			if m == nil || m.Index < index {
				return false, fmt.Sprintf("%s at %+v", s.Name, m)
			}
		}
		return true, ""
	})
}

// checkPlugins checks that s holds exactly the plugins names of type typ,
// reading its own replica once it has applied atLeast (0: a linearizable
// read through the leader).
func checkPlugins(ctx context.Context, t *testing.T, s *proctest.Agent, typ string, names []string, atLeast uint64) {
	t.Helper()
	q := &client.QueryOptions{Stale: atLeast > 0}
	l, m, err := s.API.List(ctx, typ, q)
	if err != nil {
		t.Fatalf("%s: list %s: %v", s.Name, typ, err)
	}
	if m.Index < atLeast {
		t.Fatalf("%s: at index %d; want %d or more", s.Name, m.Index, atLeast)
	}
	var got []string
	for _, p := range l {
		got = append(got, p.Name)
	}
	if !slices.Equal(got, names) {
		t.Fatalf("%s: %d %s plugins, want the %d acknowledged; missing or extra: got %v", s.Name, len(got), typ, len(names), got)
	}
}

// raftAddrs maps the servers' node IDs to their server addresses, as
// plugreg members shows them.
func raftAddrs(ctx context.Context, t *testing.T, api *client.Client) map[string]string {
	t.Helper()
	ms, err := api.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, m := range ms {
		if m.RaftAddr != "" {
			out[m.Name] = m.RaftAddr
		}
	}
	return out
}

// writePeersJSON writes a peers.json naming one server into dir.
func writePeersJSON(t *testing.T, dir, id, addr string) string {
	t.Helper()
	path := filepath.Join(dir, cluster.PeersFileName)
	b := fmt.Appendf(nil, "[\n  {\"id\": %q, \"address\": %q, \"non_voter\": false}\n]\n", id, addr)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// inspectDir runs plugreg operator raft inspect -json on a data dir.
func inspectDir(t *testing.T, bin, dir string) cluster.DataDirState {
	t.Helper()
	out, err := runCLI(bin, "operator", "raft", "inspect", "-json", "-data-dir", dir)
	if err != nil {
		t.Fatalf("inspect %s: %v\n%s", dir, err, out)
	}
	var st cluster.DataDirState
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("inspect %s: %v\n%s", dir, err, out)
	}
	return st
}

// runCLI runs the binary, bounded: a command that waits on a lock would
// otherwise hang the test.
func runCLI(bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if ctx.Err() != nil {
		return string(out), fmt.Errorf("plugreg %s: still running after 30s: %w", strings.Join(args, " "), ctx.Err())
	}
	return string(out), err
}
