package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/tools/jepsen/check"
)

// fault is one nemesis action as recorded: what, when, and whether it was
// seen to take effect.
type fault struct {
	Name   string
	Family string
	Start  int64 // ns since the run began
	End    int64
	Effect bool
	Detail string
	// A client agent cut off from every server (isolate-client): which,
	// and when the rules were in place (from the first to the last
	// moment). What it answered ok meanwhile cannot have come from a
	// server.
	Cut            string `json:",omitempty"`
	CutFrom, CutTo int64  `json:",omitempty"`
}

// families of faults, as the -nemesis flag names them.
var families = []string{"kill", "pause", "partition", "snapshot", "membership", "transfer", "restart", "disk", "deposed-leader", "powerloss", "fsync", "slow-disk", "rollback"}

type nemesis struct {
	db     *db
	net    *netFaults
	rng    *rand.Rand
	clock  func() int64
	fams   []string
	load   func(ctx context.Context, node int, d time.Duration) int // writes through node for d (workload.burst)
	read   func(ctx context.Context, j int) check.Op                // a recorded linearizable read through client agent j (workload.clientRead)
	logf   func(format string, args ...interface{})
	mu     sync.Mutex // guards faults, stuck
	faults []fault
	stuck  []check.Violation // nodes that did not catch up after a fault
}

func (nm *nemesis) record(f fault) {
	nm.mu.Lock()
	defer nm.mu.Unlock()
	nm.faults = append(nm.faults, f)
}

func (nm *nemesis) history() []fault {
	nm.mu.Lock()
	defer nm.mu.Unlock()
	return append([]fault(nil), nm.faults...)
}

func (nm *nemesis) sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// run injects faults until ctx is done: a quiet spell, then one fault of a
// family picked at random (every family in turn first, so a short run
// still exercises each), healed before the next.
func (nm *nemesis) run(ctx context.Context) {
	order := append([]string(nil), nm.fams...)
	nm.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	for k := 0; ; k++ {
		if !nm.sleep(ctx, time.Duration(1000+nm.rng.Intn(2000))*time.Millisecond) {
			return
		}
		fam := order[k%len(order)]
		if k >= len(order) {
			fam = nm.fams[nm.rng.Intn(len(nm.fams))]
		}
		nm.inject(ctx, fam)
	}
}

func (nm *nemesis) inject(ctx context.Context, fam string) {
	var actions []func(context.Context) fault
	clients := len(nm.db.clients) > 0
	switch fam {
	case "kill":
		actions = []func(context.Context) fault{nm.killRandom, nm.killLeader, nm.killAll}
		if clients {
			actions = append(actions, nm.killClient, nm.downClient)
		}
	case "pause":
		actions = []func(context.Context) fault{nm.pauseLeader, nm.strobe}
		if clients {
			actions = append(actions, nm.pauseClient)
		}
	case "partition":
		actions = []func(context.Context) fault{nm.isolateLeader, nm.isolateFollower, nm.bridge, nm.flap, nm.loss}
		if clients {
			// Twice: the fault that tells an agent that answers from
			// nowhere from one that fails honestly.
			actions = append(actions, nm.isolateClient, nm.isolateClient)
		}
	case "snapshot":
		actions = []func(context.Context) fault{nm.snapshotInstall}
	case "membership":
		actions = []func(context.Context) fault{nm.removeWipeReadd, nm.restartRemoved}
	case "transfer":
		actions = []func(context.Context) fault{nm.transfer}
	case "restart":
		// The leader twice as often: the restart that followers forwarding
		// to it are most likely to meet half-started.
		actions = []func(context.Context) fault{nm.restartLeader, nm.restartLeader, nm.restartRandom, nm.restartTwice}
		if clients {
			actions = append(actions, nm.restartClient)
		}
	case "disk":
		actions = []func(context.Context) fault{nm.diskFullFollower, nm.diskFullFollower, nm.diskFullLeader}
	case "deposed-leader": // deposed.go
		actions = []func(context.Context) fault{nm.deposedLeader}
	case "powerloss":
		actions = nm.powerLossActions()
	case "fsync": // fsync.go
		actions = []func(context.Context) fault{nm.fsyncFailLeader, nm.fsyncFailFollower}
	case "slow-disk": // fsync.go
		actions = []func(context.Context) fault{nm.slowDiskLeader, nm.slowDiskFollower}
	case "rollback": // rollback.go
		actions = []func(context.Context) fault{nm.rollback}
	}
	start := nm.clock()
	f := actions[nm.rng.Intn(len(actions))](ctx)
	f.Family, f.Start, f.End = fam, start, nm.clock()
	nm.logf("nemesis %-22s effect=%-5v %s", f.Name, f.Effect, f.Detail)
	nm.record(f)
	nm.catchUp(ctx, f)
}

// catchUpBound is how long every node has, after a fault is healed, to
// apply what the leader had applied at the heal.
const catchUpBound = 20 * time.Second

// catchUp checks liveness after a healed fault: every node must apply the
// leader's applied index within catchUpBound. A follower that still hears
// the leader's heartbeats but never receives another entry (hashicorp/raft
// issue 612) fails here, whatever fault comes next.
func (nm *nemesis) catchUp(ctx context.Context, f fault) {
	var wg sync.WaitGroup
	for j := range nm.db.clients {
		wg.Add(1)
		go func(j int) {
			defer wg.Done()
			nm.clientCatchUp(ctx, f, j)
		}(j)
	}
	defer wg.Wait()
	l, _ := nm.db.leader(ctx)
	if l < 0 {
		return // recoverAll found no leader; the next fault or the final check will tell
	}
	h, err := nm.db.health(ctx, l)
	if err != nil {
		return
	}
	target := h.AppliedIndex
	behind := map[int]string{}
	ok := nm.waitFor(ctx, catchUpBound, 200*time.Millisecond, func() bool {
		clear(behind)
		for i := range nm.db.nodes {
			if !nm.db.running(i) {
				// Crashed (the process watch reports it): restart it, as a
				// supervisor would, and see whether it catches up then.
				behind[i] = "not running: it crashed, and was restarted"
				nm.db.start(i)
				continue
			}
			h, err := nm.db.health(ctx, i)
			switch {
			case err != nil:
				behind[i] = "not answering: " + err.Error()
			case h.AppliedIndex < target:
				behind[i] = fmt.Sprintf("at applied index %d, %s in term %d, leader %q", h.AppliedIndex, h.RaftState, h.Term, h.Leader)
			}
		}
		return len(behind) == 0
	})
	if ok || ctx.Err() != nil {
		return // caught up, or the run ended first: the final check takes over
	}
	for i, why := range behind {
		v := check.Violation{Checker: "catch-up", Detail: fmt.Sprintf("after %s (healed at %.1fs), %s had not applied index %d (the leader %s's at the heal) %v later: %s",
			f.Name, float64(f.End)/1e9, nm.db.nodes[i].Name, target, nm.db.nodes[l].Name, catchUpBound, why)}
		nm.logf("%s", v)
		nm.mu.Lock()
		nm.stuck = append(nm.stuck, v)
		nm.mu.Unlock()
	}
}

// clientCatchUp is catchUp for client agent j, which has no Raft and no
// applied index of its own: within catchUpBound of the heal it must answer
// a linearizable read (recorded like any other operation). A crashed agent
// is restarted, as a supervisor would.
func (nm *nemesis) clientCatchUp(ctx context.Context, f fault, j int) {
	i := nm.db.clientIndex(j)
	var last check.Op
	attempts := 0
	ok := nm.waitFor(ctx, catchUpBound, 500*time.Millisecond, func() bool {
		if !nm.db.running(i) {
			nm.db.start(i)
		}
		attempts++
		last = nm.read(ctx, j)
		return last.Outcome == check.OK
	})
	if ok || ctx.Err() != nil {
		return
	}
	v := check.Violation{Checker: "catch-up", Detail: fmt.Sprintf("after %s (healed at %.1fs), client agent %s answered no linearizable read within %v (%d attempts; the last: %s %s)",
		f.Name, float64(f.End)/1e9, nm.db.clients[j].Name, catchUpBound, attempts, last.Outcome, last.Error)}
	nm.logf("%s", v)
	nm.mu.Lock()
	nm.stuck = append(nm.stuck, v)
	nm.mu.Unlock()
}

// stuckNodes returns catchUp's violations.
func (nm *nemesis) stuckNodes() []check.Violation {
	nm.mu.Lock()
	defer nm.mu.Unlock()
	return append([]check.Violation(nil), nm.stuck...)
}

// waitFor polls cond every interval until it holds (true), d passes or
// ctx ends (false).
func (nm *nemesis) waitFor(ctx context.Context, d, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) || !nm.sleep(ctx, interval) {
			return false
		}
	}
}

func (nm *nemesis) duration() time.Duration {
	return time.Duration(2000+nm.rng.Intn(3000)) * time.Millisecond
}

func (nm *nemesis) leaderOrRandom(ctx context.Context) int {
	if l, _ := nm.db.leader(ctx); l >= 0 {
		return l
	}
	return nm.rng.Intn(len(nm.db.nodes))
}

func (nm *nemesis) follower(ctx context.Context) int { return nm.otherThan(nm.leaderOrRandom(ctx)) }

// otherThan picks a node other than l at random.
func (nm *nemesis) otherThan(l int) int {
	return (l + 1 + nm.rng.Intn(len(nm.db.nodes)-1)) % len(nm.db.nodes)
}

// recoverAll restarts dead nodes, resumes paused ones, heals the network,
// frees full disks, and waits for a leader.
func (nm *nemesis) recoverAll(ctx context.Context) {
	nm.net.heal()
	for i, n := range nm.db.hosts {
		if !n.Client {
			os.Remove(ballast(n))
		}
		nm.db.resume(i)
		if !nm.db.running(i) {
			if err := nm.db.start(i); err != nil {
				nm.logf("restart %s: %v", n.Name, err)
			}
		}
	}
	nm.db.waitLeader(ctx, 30*time.Second)
}

func (nm *nemesis) kill(ctx context.Context, name string, idx []int) fault {
	f := fault{Name: name}
	for _, i := range idx {
		if err := nm.db.kill(i); err != nil {
			f.Detail = err.Error()
		}
	}
	f.Effect = true
	for _, i := range idx {
		f.Effect = f.Effect && !nm.db.running(i)
		f.Detail += nm.db.hosts[i].Name + " "
	}
	nm.sleep(ctx, nm.duration())
	nm.recoverAll(ctx)
	return f
}

func (nm *nemesis) killRandom(ctx context.Context) fault {
	return nm.kill(ctx, "kill-random", []int{nm.rng.Intn(3)})
}
func (nm *nemesis) killLeader(ctx context.Context) fault {
	return nm.kill(ctx, "kill-leader", []int{nm.leaderOrRandom(ctx)})
}
func (nm *nemesis) killAll(ctx context.Context) fault {
	return nm.kill(ctx, "kill-all", []int{0, 1, 2})
}

// randomClient picks a client agent at random: its process number.
func (nm *nemesis) randomClient() int { return nm.db.clientIndex(nm.rng.Intn(len(nm.db.clients))) }

func (nm *nemesis) killClient(ctx context.Context) fault {
	return nm.kill(ctx, "kill-client", []int{nm.randomClient()})
}

// downClient kills a client agent and keeps it down until gossip has
// declared it failed and the leader has marked its instances suspect (the
// effect: a server's state shows every instance of the node with
// Health.Check "node"), at most 30 s; then restarts it. The marks and
// their clearing are log entries the checkers replay like any other.
func (nm *nemesis) downClient(ctx context.Context) fault {
	i := nm.randomClient()
	n := nm.db.hosts[i]
	f := fault{Name: "down-client"}
	// Its stub plugin may still be coming back from an earlier fault:
	// wait for it to be registered, so the mark has an instance to change.
	nodePath := "/v1/nodes/" + n.Name + "/plugins"
	nm.waitFor(ctx, 30*time.Second, 200*time.Millisecond, func() bool {
		var ps []api.PluginInfo
		return nm.readAnyServer(ctx, nodePath, &ps) && len(ps) > 0
	})
	// And put another instance in front of it, so that the mark changes
	// an instance behind the front of its list, in place.
	nm.registerInFront(ctx)
	if err := nm.db.kill(i); err != nil {
		f.Detail = err.Error()
	}
	marked, listed := 0, 0
	f.Effect = nm.waitFor(ctx, 30*time.Second, 500*time.Millisecond, func() bool {
		var ps []api.PluginInfo
		if !nm.readAnyServer(ctx, nodePath, &ps) {
			return false
		}
		marked, listed = 0, len(ps)
		for _, p := range ps {
			if p.Health != nil && p.Health.Check == api.CheckNode {
				marked++
			}
		}
		return len(ps) > 0 && marked == len(ps)
	})
	f.Detail = fmt.Sprintf("%s down; %d of its %d instances marked suspect by the leader: %v; its stub plugin's instance behind the front of %s/%s: %v",
		n.Name, marked, listed, f.Effect, check.StubPluginType, stubName, nm.stubBehindFront(ctx, n.Name))
	nm.recoverAll(ctx)
	return f
}

// readAnyServer reads path stale from the first server that answers it
// (200) into out; false when none does.
func (nm *nemesis) readAnyServer(ctx context.Context, path string, out any) bool {
	for _, srv := range nm.db.nodes {
		if found, err := staleRead(ctx, nm.db, srv.HTTP, path, out); err == nil && found {
			return true
		}
	}
	return false
}

// registerInFront registers (again, with a new version) an instance of
// the stub plugins' name on node "harness", no gossip member, which is
// then the front of their recency list. With no request ID on type
// jplugin, the writes checker takes it as an agent's own write; the
// workload's models never see the type.
func (nm *nemesis) registerInFront(ctx context.Context) {
	body, _ := json.Marshal(api.PluginInfo{Type: check.StubPluginType, Name: stubName, AllocID: "front", NodeID: "harness",
		Version: strconv.FormatInt(time.Now().UnixNano(), 10), ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/front.sock"}})
	for _, srv := range nm.db.nodes {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+srv.HTTP+"/v1/plugins", bytes.NewReader(body))
		if err != nil {
			return
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := nm.db.hc.Do(req)
		if err != nil {
			continue
		}
		resp.Body.Close()
		if resp.StatusCode/100 == 2 {
			return
		}
	}
}

// stubBehindFront reports whether node's stub plugin instance is behind
// the front of the stub plugins' recency list, as a server lists it: a
// health mark then changes an instance in place, not at the front.
func (nm *nemesis) stubBehindFront(ctx context.Context, node string) bool {
	var ps []api.PluginInfo
	if !nm.readAnyServer(ctx, "/v1/plugins/"+check.StubPluginType+"/"+stubName, &ps) {
		return false
	}
	i := slices.IndexFunc(ps, func(p api.PluginInfo) bool { return p.NodeID == node })
	return i > 0
}

// pauseClient stops a client agent (SIGSTOP) for a while: its callers and
// its subscribers hang, and its own calls to the servers time out.
func (nm *nemesis) pauseClient(ctx context.Context) fault {
	i := nm.randomClient()
	f := fault{Name: "pause-client"}
	if err := nm.db.pause(i); err != nil {
		f.Detail = err.Error()
		nm.recoverAll(ctx)
		return f
	}
	_, err := nm.db.health(ctx, i)
	f.Effect = err != nil // a stopped process does not answer
	nm.sleep(ctx, nm.duration())
	nm.db.resume(i)
	f.Detail = fmt.Sprintf("%s stopped; not answering: %v", nm.db.hosts[i].Name, f.Effect)
	nm.recoverAll(ctx)
	return f
}

// isolateClient cuts a client agent off from every server (gossip and
// RPC; the harness still reaches its HTTP API): every request through it
// must fail (no_server, not_applied or unknown) until the heal, and never
// succeed from nowhere.
func (nm *nemesis) isolateClient(ctx context.Context) fault {
	i := nm.randomClient()
	n := nm.db.hosts[i]
	f := fault{Name: "isolate-client", Cut: n.Name}
	nm.net.isolateFrom(n.IP, nm.net.ips)
	f.CutFrom = nm.clock()
	// Verified: the rules are in, and the agent says it reaches no
	// server (its health asks one, with a 2 s bound of its own; not
	// answering the harness's 1 s health call counts as well).
	var status string
	f.Effect = nm.net.rules() == len(nm.net.ips)*2*rulesPerCut && nm.waitFor(ctx, 10*time.Second, 200*time.Millisecond, func() bool {
		h, err := nm.db.health(ctx, i)
		if err != nil {
			status = "not answering: " + err.Error()
			return true
		}
		status = h.Status
		return h.Status != "ok"
	})
	f.Detail = fmt.Sprintf("%s cut off from every server; its health: %s", n.Name, status)
	nm.sleep(ctx, nm.duration()/2)
	f.CutTo = nm.clock()
	nm.recoverAll(ctx)
	return f
}

func (nm *nemesis) restartClient(ctx context.Context) fault {
	return nm.fastRestart(ctx, "restart-client", nm.randomClient(), false, 0, 1)
}

// withLeader starts the record of a fault that needs a leader: it returns
// the fault, the leader and its term, or a fault that says there was none.
func (nm *nemesis) withLeader(ctx context.Context, name string) (f fault, l int, term uint64, ok bool) {
	f = fault{Name: name}
	if l, term = nm.db.leader(ctx); l < 0 {
		f.Detail = "no leader"
		return f, l, term, false
	}
	return f, l, term, true
}

// newLeaderBeyond waits up to d for a node other than old to lead in a
// term after term.
func (nm *nemesis) newLeaderBeyond(ctx context.Context, old int, term uint64, d time.Duration) bool {
	return nm.waitFor(ctx, d, 50*time.Millisecond, func() bool { return nm.otherLeads(ctx, old, term) })
}

func (nm *nemesis) pauseLeader(ctx context.Context) fault {
	l, term := nm.db.leader(ctx)
	f := fault{Name: "pause-leader"}
	if l < 0 {
		f.Detail = "no leader to pause"
		return f
	}
	if err := nm.db.pause(l); err != nil {
		f.Detail = err.Error()
		return f
	}
	// Past the election timeout: the others elect a new leader while the
	// paused one still believes it leads.
	f.Effect = nm.newLeaderBeyond(ctx, l, term, 10*nm.db.hbTimeout+2*time.Second)
	f.Detail = fmt.Sprintf("%s paused in term %d; new leader elected: %v", nm.db.nodes[l].Name, term, f.Effect)
	nm.sleep(ctx, nm.duration()/2)
	nm.db.resume(l)
	nm.recoverAll(ctx)
	return f
}

func (nm *nemesis) strobe(ctx context.Context) fault {
	i := nm.rng.Intn(3)
	f := fault{Name: "strobe"}
	end := time.Now().Add(nm.duration())
	cycles := 0
	for time.Now().Before(end) && ctx.Err() == nil {
		if nm.db.pause(i) != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
		nm.db.resume(i)
		time.Sleep(50 * time.Millisecond)
		cycles++
	}
	nm.db.resume(i)
	f.Effect = cycles > 0
	f.Detail = fmt.Sprintf("%s stopped 50ms of every 100ms, %d cycles", nm.db.nodes[i].Name, cycles)
	nm.recoverAll(ctx)
	return f
}

func (nm *nemesis) isolateLeader(ctx context.Context) fault {
	f, l, term, ok := nm.withLeader(ctx, "isolate-leader")
	if !ok {
		return f
	}
	nm.net.isolate(nm.db.nodes[l].IP)
	f.Effect = nm.net.rules() > 0 && nm.newLeaderBeyond(ctx, l, term, 10*nm.db.hbTimeout+2*time.Second)
	f.Detail = fmt.Sprintf("%s cut off in term %d; majority elected another: %v", nm.db.nodes[l].Name, term, f.Effect)
	nm.sleep(ctx, nm.duration()/2)
	nm.recoverAll(ctx)
	return f
}

func (nm *nemesis) isolateFollower(ctx context.Context) fault {
	i := nm.follower(ctx)
	f := fault{Name: "isolate-follower"}
	nm.net.isolate(nm.db.nodes[i].IP)
	// The follower loses its leader once it misses heartbeats.
	f.Effect = nm.net.rules() > 0 && nm.waitFor(ctx, 10*nm.db.hbTimeout+2*time.Second, 50*time.Millisecond, func() bool {
		h, err := nm.db.health(ctx, i)
		return err == nil && (h.Leader == "" || h.RaftState == "Candidate")
	})
	f.Detail = fmt.Sprintf("%s cut off; lost its leader: %v", nm.db.nodes[i].Name, f.Effect)
	nm.sleep(ctx, nm.duration()/2)
	nm.recoverAll(ctx)
	return f
}

func (nm *nemesis) bridge(ctx context.Context) fault {
	p := nm.rng.Perm(3)
	a, b, c := nm.db.nodes[p[0]], nm.db.nodes[p[1]], nm.db.nodes[p[2]]
	nm.net.cut(a.IP, c.IP)
	f := fault{Name: "bridge", Effect: nm.net.rules() == 2*rulesPerCut,
		Detail: fmt.Sprintf("%s-%s and %s-%s connected, %s-%s cut", a.Name, b.Name, b.Name, c.Name, a.Name, c.Name)}
	nm.sleep(ctx, nm.duration())
	nm.recoverAll(ctx)
	return f
}

func (nm *nemesis) flap(ctx context.Context) fault {
	f := fault{Name: "flapping"}
	end := time.Now().Add(nm.duration())
	flips := 0
	for time.Now().Before(end) && ctx.Err() == nil {
		i := nm.rng.Intn(3)
		nm.net.isolate(nm.db.nodes[i].IP)
		if nm.net.rules() > 0 {
			flips++
		}
		time.Sleep(time.Duration(200+nm.rng.Intn(300)) * time.Millisecond)
		nm.net.heal()
		time.Sleep(time.Duration(200+nm.rng.Intn(300)) * time.Millisecond)
	}
	f.Effect, f.Detail = flips > 0, fmt.Sprintf("%d partitions of 200-500ms", flips)
	nm.recoverAll(ctx)
	return f
}

func (nm *nemesis) loss(ctx context.Context) fault {
	nm.net.loss(0.2)
	f := fault{Name: "packet-loss", Effect: nm.net.rules() == 6*rulesPerCut, Detail: "20% of packets between nodes dropped"}
	nm.sleep(ctx, nm.duration())
	nm.recoverAll(ctx)
	return f
}

// snapshotInstall cuts a follower off until the leader has snapshotted
// (and compacted) past it, then heals: the follower must install the
// snapshot, which its log says ("Installed remote snapshot": catching up
// from the leader's log instead would move its snapshot index just as
// well, once it took one of its own).
func (nm *nemesis) snapshotInstall(ctx context.Context) fault {
	f, l, _, ok := nm.withLeader(ctx, "snapshot-install")
	if !ok {
		return f
	}
	i := nm.otherThan(l)
	n := nm.db.nodes[i]
	before, err := nm.db.health(ctx, i)
	if err != nil {
		f.Detail = err.Error()
		nm.recoverAll(ctx)
		return f
	}
	mark := logSize(n.Log)
	nm.net.isolate(n.IP)
	past := nm.waitFor(ctx, 30*time.Second, 100*time.Millisecond, func() bool {
		h, err := nm.db.health(ctx, l)
		return err == nil && h.LastSnapshotIndex > before.AppliedIndex+uint64(nm.db.snapshotThr)+nm.db.compactionLag()
	})
	// Half the time, where the data dirs have a size (the disk family's
	// tmpfs, the lazyfs), the follower's disk is full when the snapshot
	// comes: the install fails until it is freed 3 s later.
	full := false
	if (len(nm.db.mounts) > 0 || len(nm.db.lazy) > 0) && nm.rng.Intn(2) == 0 {
		f.Name = "snapshot-install-disk-full"
		full, _ = fillDisk(n)
	}
	nm.net.heal()
	if full {
		nm.sleep(ctx, 3*time.Second)
		freeDisk(n)
	}
	installs := 0
	nm.waitFor(ctx, 20*time.Second, 100*time.Millisecond, func() bool {
		installs, _, _ = countLog(n.Log, mark, markSnapshot)
		return installs > 0
	})
	f.Effect = past && installs > 0 && (full || f.Name == "snapshot-install")
	f.Detail = fmt.Sprintf("%s cut off at %d; leader snapshotted past it: %v; its disk full for 3 s as the snapshot came: %v; follower installed a snapshot: %v", n.Name, before.AppliedIndex, past, full, installs > 0)
	nm.recoverAll(ctx)
	return f
}

func (nm *nemesis) peers(ctx context.Context, i int) int {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+nm.db.nodes[i].HTTP+"/v1/status/peers", nil)
	resp, err := nm.db.hc.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var ps []string
	json.NewDecoder(resp.Body).Decode(&ps)
	return len(ps)
}

// memberFailed waits until the leader's gossip reports node i failed, so
// the leader does not add it straight back.
func (nm *nemesis) memberFailed(ctx context.Context, l, i int) bool {
	return nm.waitFor(ctx, 20*time.Second, 200*time.Millisecond, func() bool {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+nm.db.nodes[l].HTTP+"/v1/members", nil)
		resp, err := nm.db.hc.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var ms []struct{ Name, Status string }
		json.NewDecoder(resp.Body).Decode(&ms)
		for _, m := range ms {
			if m.Name == nm.db.nodes[i].Name && m.Status != "alive" {
				return true
			}
		}
		return false
	})
}

// remove kills a follower and removes it from the Raft configuration;
// then wipe (or not) and restart it, and see the leader add it back.
func (nm *nemesis) remove(ctx context.Context, name string, wipe bool) fault {
	f, l, _, ok := nm.withLeader(ctx, name)
	if !ok {
		return f
	}
	i := nm.otherThan(l)
	nm.db.kill(i)
	if !nm.memberFailed(ctx, l, i) {
		f.Detail = "gossip never reported the node failed"
		nm.recoverAll(ctx)
		return f
	}
	l, err := nm.removePeer(ctx, l, i)
	if err != nil {
		f.Detail = err.Error()
		nm.recoverAll(ctx)
		return f
	}
	removed := nm.peers(ctx, l) == 2
	readded := nm.readd(ctx, i, wipe)
	f.Effect = removed && readded
	f.Detail = fmt.Sprintf("%s removed: %v, wiped: %v, voter again: %v", nm.db.nodes[i].Name, removed, wipe, readded)
	nm.recoverAll(ctx)
	return f
}

// readd starts server i again, its data dir emptied first if wipe, once it
// was removed from the configuration, and reports whether the leader made
// it a voter again.
func (nm *nemesis) readd(ctx context.Context, i int, wipe bool) bool {
	if wipe {
		nm.db.wipe(i)
	}
	nm.sleep(ctx, nm.duration()/2)
	nm.db.start(i)
	return nm.waitFor(ctx, 30*time.Second, 200*time.Millisecond, func() bool {
		ll, _ := nm.db.leader(ctx)
		return ll >= 0 && nm.peers(ctx, ll) == 3
	})
}

// removePeer removes server i from the Raft configuration through the
// leader, l or whichever server leads once it moved (short election
// timeouts on a busy machine), a few times; it returns the server asked.
func (nm *nemesis) removePeer(ctx context.Context, l, i int) (int, error) {
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if ll, _ := nm.db.leader(ctx); ll >= 0 && ll != i {
			l = ll
		}
		if err = nm.db.operator(ctx, l, http.MethodDelete, "/v1/operator/peers/"+nm.db.nodes[i].Name); err == nil {
			return l, nil
		}
		nm.sleep(ctx, 300*time.Millisecond)
	}
	return l, err
}

func (nm *nemesis) removeWipeReadd(ctx context.Context) fault {
	return nm.remove(ctx, "remove-wipe-readd", true)
}
func (nm *nemesis) restartRemoved(ctx context.Context) fault {
	return nm.remove(ctx, "restart-removed", false)
}

func (nm *nemesis) transfer(ctx context.Context) fault {
	f, l, term, ok := nm.withLeader(ctx, "leadership-transfer")
	if !ok {
		return f
	}
	if err := nm.db.operator(ctx, l, http.MethodPost, "/v1/operator/leadership-transfer"); err != nil {
		f.Detail = err.Error()
	}
	f.Effect = nm.newLeaderBeyond(ctx, l, term, 10*time.Second)
	f.Detail += fmt.Sprintf(" from %s in term %d; moved: %v", nm.db.nodes[l].Name, term, f.Effect)
	nm.recoverAll(ctx)
	return f
}

// restartDelay draws how long a killed node stays down in the restart
// family: 0-2 s, and two times in three under half the election timeout,
// so that the node is usually back before the others have elected a new
// leader, while they still forward reads and writes to it.
func (nm *nemesis) restartDelay() time.Duration {
	upTo := 2 * time.Second
	if nm.rng.Intn(3) > 0 {
		upTo = min(upTo, nm.db.hbTimeout/2)
	}
	return time.Duration(nm.rng.Int63n(int64(upTo) + 1))
}

// otherLeads reports whether a node other than i leads in a term after
// term: whether the cluster has moved on from i.
func (nm *nemesis) otherLeads(ctx context.Context, i int, term uint64) bool {
	for j := range nm.db.nodes {
		if j == i {
			continue
		}
		if h, err := nm.db.health(ctx, j); err == nil && h.RaftState == "Leader" && h.Term > term {
			return true
		}
	}
	return false
}

// fastRestart kill -9s node i and starts it again after restartDelay,
// times times in a row. It took effect when every kill left no process
// and every start left a new one running.
func (nm *nemesis) fastRestart(ctx context.Context, name string, i int, wasLeader bool, term uint64, times int) fault {
	f := fault{Name: name, Effect: true}
	n := nm.db.hosts[i]
	role := "follower"
	switch {
	case n.Client:
		role = "client agent"
	case wasLeader:
		role = fmt.Sprintf("leader in term %d", term)
	}
	var steps []string
	for k := 0; k < times; k++ {
		if k > 0 {
			nm.sleep(ctx, time.Duration(nm.rng.Intn(1000))*time.Millisecond) // up, briefly
		}
		old := nm.db.pid(i)
		err := nm.db.kill(i)
		gone := err == nil && old != 0 && !nm.db.running(i)
		delay := nm.restartDelay()
		nm.sleep(ctx, delay)
		movedOn := !n.Client && nm.otherLeads(ctx, i, term)
		err = nm.db.start(i)
		back := err == nil && nm.db.pid(i) != 0 && nm.db.pid(i) != old
		f.Effect = f.Effect && gone && back
		steps = append(steps, fmt.Sprintf("killed (pid %d gone: %v), restarted after %v (new process: %v, a new leader already: %v)",
			old, gone, delay.Round(time.Millisecond), back, movedOn))
	}
	// Up again: the restarted process answers. A crash right after the
	// start is the process watch's to report; recoverAll restarts it.
	up := false
	nm.waitFor(ctx, 10*time.Second, 100*time.Millisecond, func() bool {
		_, err := nm.db.health(ctx, i)
		up = err == nil
		return up || !nm.db.running(i)
	})
	f.Detail = fmt.Sprintf("%s (%s): %s; answering: %v", n.Name, role, strings.Join(steps, "; "), up)
	nm.recoverAll(ctx)
	return f
}

func (nm *nemesis) restartLeader(ctx context.Context) fault {
	l, term := nm.db.leader(ctx)
	if l < 0 {
		return nm.fastRestart(ctx, "restart-leader", nm.rng.Intn(len(nm.db.nodes)), false, term, 1)
	}
	return nm.fastRestart(ctx, "restart-leader", l, true, term, 1)
}

func (nm *nemesis) restartRandom(ctx context.Context) fault {
	l, term := nm.db.leader(ctx)
	i := nm.rng.Intn(len(nm.db.nodes))
	return nm.fastRestart(ctx, "restart-random", i, i == l, term, 1)
}

// restartTwice restarts the leader, then again before it has settled: a
// crash loop as a supervisor with a short restart delay would make one.
func (nm *nemesis) restartTwice(ctx context.Context) fault {
	l, term := nm.db.leader(ctx)
	if l < 0 {
		return nm.fastRestart(ctx, "restart-twice", nm.rng.Intn(len(nm.db.nodes)), false, term, 2)
	}
	return nm.fastRestart(ctx, "restart-twice", l, true, term, 2)
}
