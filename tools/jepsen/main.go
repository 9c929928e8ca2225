// Command jepsen is plugreg's fault-injection suite: it builds plugreg,
// runs three servers as separate processes on 127.0.0.1, .2 and .3 and
// client agents (-client-agents, default 1) on .4, .5, ..., drives them
// with concurrent clients (from 127.0.0.100) and subscribers while a
// seeded nemesis kills, pauses, partitions and reconfigures them, records
// everything on one monotonic clock, and checks the history. It exits
// non-zero on any violation, or when the run was not valid (no fault took
// effect, or too little got done before the faults).
//
//	go -C tools/jepsen run . -time-limit 90s -nemesis all
package main

import (
	"context"
	"flag"
	"fmt"
	"github.com/plugreg/plugreg/tests/framework/proctest"
	"math/rand"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/plugreg/plugreg/internal/otlpsink"
	"github.com/plugreg/plugreg/tools/jepsen/check"
)

type runConfig struct {
	timeLimit         time.Duration
	seed              int64
	nemesis           []string
	nemesisAll        bool // -nemesis all: a family this machine cannot run is left out, not an error
	rate              float64
	concurrency       int
	subscribers       int
	types             int
	staleReads        bool
	out               string
	portBase          int
	heartbeatTimeout  time.Duration
	timeouts          string // -timeouts: random, default or short
	defaultTimeouts   bool   // this run leaves the agent's timeouts at their defaults
	plugregBin        string // a prebuilt agent, or "" to build ./cmd/plugreg
	secure            bool   // TLS, gossip encryption and ACLs on (secure.go)
	tracing           bool   // every agent traces every request to a sink here
	snapshotThreshold int
	journalSize       int
	checkTimeout      time.Duration
	minThroughput     float64
	clientAgents      int           // client agent processes on 127.0.0.4, .5, ...
	logStoreFlag      string        // -log-store: wal, boltdb or random
	logStore          string        // this run's Raft log store, on every server: wal or boltdb
	walSegment        int           // -wal-segment-size
	leaseHolders      int           // -lease-holders
	leaseTTL          time.Duration // -lease-ttl
	unsafeRenewals    bool          // -unsafe-lease-renewals

	powerlossNames string // -powerloss-names: when a name is durable on the servers' lazyfs
}

func main() {
	var r runConfig
	var nem string
	flag.DurationVar(&r.timeLimit, "time-limit", 90*time.Second, "how long the workload and the nemesis run")
	flag.Int64Var(&r.seed, "seed", 0, "random seed (0: from the clock); the same seed replays the same schedule of choices")
	flag.StringVar(&nem, "nemesis", "all", "fault families, comma-separated: "+strings.Join(families, ",")+", or all, or none")
	flag.Float64Var(&r.rate, "rate", 100, "client operations per second, all clients together")
	flag.IntVar(&r.concurrency, "concurrency", 8, "client processes")
	flag.IntVar(&r.subscribers, "subscribers", 3, "event-stream subscribers")
	flag.IntVar(&r.types, "types", 6, "plugin types (the linearizability checker's partitions)")
	flag.BoolVar(&r.staleReads, "unsafe-stale-reads", false, "read with consistency=stale but check as linearizable: the checkers must catch it")
	flag.IntVar(&r.leaseHolders, "lease-holders", 3, "holders of leased registrations (type jlease): each registers with -lease-ttl, renews every third of it, lets go after 2-12 s and starts again (0: none)")
	flag.DurationVar(&r.leaseTTL, "lease-ttl", 3*time.Second, "the lease holders' TTL (1s at least)")
	flag.BoolVar(&r.unsafeRenewals, "unsafe-lease-renewals", false, "record every lease renewal as acknowledged without sending it: the leases expire while renewed on paper, and the checker must catch it")
	flag.StringVar(&r.out, "out", "results", "results directory (a subdirectory per run)")
	flag.IntVar(&r.portBase, "port-base", 18500, "HTTP port; server port is one more, gossip two more")
	flag.DurationVar(&r.checkTimeout, "check-timeout", 5*time.Minute, "porcupine's time limit (running out is a failure)")
	flag.Float64Var(&r.minThroughput, "min-throughput", 5, "ok operations per second before the first fault below which the run is invalid")
	flag.StringVar(&r.timeouts, "timeouts", "random", "Raft timeouts: short (-heartbeat-timeout 300-700ms), default (the agent's own, as users run it) or random (default one run in three)")
	flag.IntVar(&r.clientAgents, "client-agents", 1, "client agents (plugreg agent -client) on 127.0.0.4, .5, ...; part of the workload and one subscriber per agent go through them (0: servers only)")
	flag.BoolVar(&r.tracing, "tracing", false, "run every agent with tracing on and every request sampled, exporting to an OTLP sink in the harness: every write's log entry carries its trace through the faults")
	flag.BoolVar(&r.secure, "secure", false, "run every agent with mutual TLS (verify incoming, outgoing and server hostnames), gossip encryption and ACLs on with default deny; the harness uses a client certificate and the operator token, client agents an agent token")
	flag.StringVar(&r.logStoreFlag, "log-store", "random", "every server's Raft log store: wal (the agent's default), boltdb, or random (boltdb one run in four, from the seed)")
	flag.IntVar(&r.walSegment, "wal-segment-size", 32<<10, "the wal servers' -wal-segment-size, bytes (0: the agent's 16 MiB, with which a leader never compacts within a run, so never sends a snapshot)")
	flag.StringVar(&r.powerlossNames, "powerloss-names", "posix", "the powerloss family's filesystem: posix (a name is durable once its own directory is fsynced, and only then) or journal (every fsync makes every earlier create, rename and unlink durable, as ext4 and XFS do)")
	flag.StringVar(&r.plugregBin, "plugreg-bin", "", "run this plugreg binary instead of building ./cmd/plugreg (e.g. an old commit's)")
	flag.Parse()
	if r.seed == 0 {
		r.seed = time.Now().UnixNano() % 1_000_000
	}
	if r.leaseHolders < 0 || r.leaseHolders > 100 || (r.leaseHolders > 0 && r.leaseTTL < time.Second) {
		fmt.Fprintf(os.Stderr, "jepsen: -lease-holders %d -lease-ttl %v: want 0 to 100 holders and a TTL of 1s at least\n", r.leaseHolders, r.leaseTTL)
		os.Exit(2)
	}
	if r.clientAgents < 0 || r.clientAgents > 16 {
		fmt.Fprintf(os.Stderr, "jepsen: -client-agents %d: want 0 to 16\n", r.clientAgents)
		os.Exit(2)
	}
	switch nem {
	case "all":
		r.nemesis, r.nemesisAll = append([]string(nil), families...), true
	case "none", "":
	default:
		r.nemesis = strings.Split(nem, ",")
		for _, f := range r.nemesis {
			if !contains(families, f) {
				fmt.Fprintf(os.Stderr, "jepsen: unknown nemesis %q (have %s)\n", f, strings.Join(families, ", "))
				os.Exit(2)
			}
		}
	}
	// Randomised per run: short election timeouts and a low snapshot
	// threshold, so that elections and snapshot installs happen often.
	rng := rand.New(rand.NewSource(r.seed))
	r.heartbeatTimeout = time.Duration(300+rng.Intn(400)) * time.Millisecond
	r.snapshotThreshold = 100 + rng.Intn(200)
	r.journalSize = 512 + rng.Intn(1024)
	// Some runs as users run the agent, with its default timeouts: the
	// short ones hide what only a slower election lets happen (a node
	// restarted before anyone noticed it was gone).
	// Drawn whatever -timeouts says, so that the draws after it (the log
	// store) do not depend on the flag.
	defaultDraw := rng.Intn(3) == 0
	switch r.timeouts {
	case "random":
		r.defaultTimeouts = defaultDraw
	case "default":
		r.defaultTimeouts = true
	case "short":
	default:
		fmt.Fprintf(os.Stderr, "jepsen: -timeouts %q: want random, default or short\n", r.timeouts)
		os.Exit(2)
	}
	// Every server on one store, as users run them: the default (wal) in
	// most runs, boltdb in a minority so that it stays tested too. A mix
	// per node hid that a wal server could not survive a deposed leader's
	// restart (issue 24): the others kept the cluster up.
	boltDraw := rng.Intn(4) == 0
	switch r.logStoreFlag {
	case "random":
		r.logStore = "wal"
		if boltDraw {
			r.logStore = "boltdb"
		}
	case "wal", "boltdb":
		r.logStore = r.logStoreFlag
	default:
		fmt.Fprintf(os.Stderr, "jepsen: -log-store %q: want wal, boltdb or random\n", r.logStoreFlag)
		os.Exit(2)
	}

	code, err := run(&r)
	if err != nil {
		fmt.Fprintf(os.Stderr, "jepsen: %v\n", err)
		if code == 0 {
			code = 2
		}
	}
	os.Exit(code)
}

// finish heals everything and checks that the cluster is live again: a
// write through each node is applied everywhere, the nodes converge, and
// the slow watcher catches up (the other subscribers get a heartbeat's
// time). It stays within about a minute even when a node is stuck.
func finish(ctx context.Context, d *db, r *runConfig, wl *workload, nm *nemesis, slow *slowWatcher, leases *leaseHolders, logf func(string, ...interface{})) endOfRun {
	nm.recoverAll(ctx)
	e := endOfRun{stuck: nm.stuckNodes()}
	e.live = checkLiveness(ctx, wl, logf)
	convBound, watchBound := 30*time.Second, 20*time.Second
	if len(e.live.violations) > 0 {
		// A node is stuck: the checks below will see it at once.
		convBound, watchBound = 5*time.Second, 6*time.Second
	}
	if r.leaseHolders > 0 && len(e.live.violations) == 0 {
		// Every holder let go when the workload stopped: the leader
		// expires what is left within a TTL or two of the heal (a new
		// leader gives each a full TTL first). The final state, checked
		// below, must hold none.
		took, ok := leases.awaitExpiry(ctx, 3*r.leaseTTL+20*time.Second)
		logf("leases: every lease instance gone from every server %v after the heal: %v", took.Round(time.Millisecond), ok)
	}
	types := []string{check.LeaseType}
	for t := 0; t < r.types; t++ {
		types = append(types, fmt.Sprintf("t%d", t))
	}
	e.conv = converge(ctx, d, types, convBound, logf)
	t0 := time.Now()
	e.watchTarget = max(e.live.maxIndex, e.conv.index)
	var caught bool
	e.watchReached, caught = slow.catchUp(e.watchTarget, watchBound)
	logf("slow watcher: reached index %d of %d in %v; %d events received", e.watchReached, e.watchTarget, time.Since(t0).Round(time.Millisecond), slow.events.Load())
	if !caught {
		e.watchState = slow.state()
		logf("slow watcher: %s", e.watchState)
	}
	if rest := 6*time.Second - time.Since(t0); rest > 0 {
		time.Sleep(rest) // a heartbeat on every stream
	}
	return e
}

// timeoutsText says which Raft timeouts the run uses.
func (r *runConfig) timeoutsText() string {
	if r.defaultTimeouts {
		return fmt.Sprintf("raft timeouts: the agent's defaults (no -heartbeat-timeout: %v heartbeat and election)", agentDefaultTimeout)
	}
	return fmt.Sprintf("raft heartbeat/election timeout %v (-heartbeat-timeout)", r.heartbeatTimeout)
}

// logStoreText says which Raft log store the servers run, and why.
func (r *runConfig) logStoreText() string {
	how := "drawn from the seed"
	if r.logStoreFlag != "random" {
		how = "-log-store " + r.logStoreFlag
	}
	seg := ""
	if r.logStore == "wal" && r.walSegment > 0 {
		seg = fmt.Sprintf(", %d KiB segments", r.walSegment>>10)
	}
	return fmt.Sprintf("log store %s on every server (%s%s)", r.logStore, how, seg)
}

// plugregBinary is -plugreg-bin, or ./cmd/plugreg built into dir.
func plugregBinary(r *runConfig, dir string) (string, error) {
	if r.plugregBin != "" {
		bin, err := filepath.Abs(r.plugregBin)
		if err != nil {
			return "", fmt.Errorf("-plugreg-bin: %w", err)
		}
		if fi, err := os.Stat(bin); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("-plugreg-bin %s: not an executable file (%v)", bin, err)
		}
		return bin, nil
	}
	// The product's module is the repository root, not the module the
	// suite runs in.
	root, err := proctest.RepoRoot()
	if err != nil {
		return "", fmt.Errorf("run inside the repository, or pass -plugreg-bin: %w", err)
	}
	bin := filepath.Join(dir, "plugreg")
	build := exec.Command("go", "build", "-o", bin, "./cmd/plugreg")
	build.Dir = root
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("build plugreg: %w", err)
	}
	return bin, nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

// run performs one test run; the exit code is 0 (valid, no violation), 1
// (violations) or 3 (invalid run).
func run(r *runConfig) (int, error) {
	if _, err := exec.LookPath("iptables"); err != nil && len(r.nemesis) > 0 {
		return 2, fmt.Errorf("iptables is needed for the partition faults: %w", err)
	}
	if err := os.MkdirAll(r.out, 0o755); err != nil {
		return 2, err
	}
	// A directory of its own even when two runs start in the same second
	// with the same seed.
	dir, err := os.MkdirTemp(r.out, fmt.Sprintf("%s-seed%d-", time.Now().Format("20060102-150405"), r.seed))
	if err != nil {
		return 2, err
	}
	dir, _ = filepath.Abs(dir)
	logf := newLog(filepath.Join(dir, "run.log"))
	defer logf.close()
	logf.printf("run %s: seed %d, nemesis %v, %v, %s, snapshot threshold %d, journal %d, %d client agents, %s",
		dir, r.seed, r.nemesis, r.timeLimit, r.timeoutsText(), r.snapshotThreshold, r.journalSize, r.clientAgents, r.logStoreText())

	bin, err := plugregBinary(r, dir)
	if err != nil {
		return 2, err
	}
	logf.printf("agent binary: %s", bin)
	if r.secure {
		s, err := newSecurity(filepath.Join(dir, "tls"), r.clientAgents)
		if err != nil {
			return 2, fmt.Errorf("security setup: %w", err)
		}
		secure = s
	}
	d := newDB(dir, bin, r)
	d.logf = logf.printf
	var traceSink *otlpsink.Sink
	if r.tracing {
		if traceSink, err = otlpsink.Start(nil); err != nil {
			return 2, fmt.Errorf("trace sink: %w", err)
		}
		defer traceSink.Close()
		d.traceEndpoint = traceSink.URL
		logf.printf("tracing: every agent traces every request to %s", traceSink.URL)
	}
	nf := &netFaults{chain: fmt.Sprintf("PLUGREG-JEPSEN-%d", r.portBase), ports: fmt.Sprintf("%d,%d", d.serverPort, d.gossipPort)}
	if len(d.clients) > 0 {
		nf.ports += fmt.Sprintf(",%d", d.clientGosp)
	}
	for _, n := range d.nodes {
		nf.ips = append(nf.ips, n.IP)
	}
	if err := nf.setup(); err != nil {
		return 2, fmt.Errorf("iptables: %w", err)
	}
	// Whatever happens, no rule, no process and no mount outlives the run.
	cleanup := func() {
		nf.teardown()
		d.stopAll()
		d.unmountLazyFS()
		d.unmountDataDirs()
	}
	defer cleanup()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	go func() {
		if _, ok := <-sig; ok {
			cleanup()
			os.Exit(130)
		}
	}()

	if contains(r.nemesis, "disk") {
		if err := d.mountDataDirs(); err != nil {
			if !r.nemesisAll {
				return 2, fmt.Errorf("the disk family needs a tmpfs per data dir: %w", err)
			}
			logf.printf("leaving the disk family out: it needs a tmpfs per data dir: %v", err)
			r.nemesis = slices.DeleteFunc(r.nemesis, func(f string) bool { return f == "disk" })
		}
	}
	if r.logStore == "boltdb" && contains(r.nemesis, "fsync") {
		// A failed fsync stops a server on raft-wal only: bbolt reports
		// a failed commit, synced or not, and raft retries it
		// (docs/durability.md).
		logf.printf("leaving the fsync family out: the servers run boltdb, where a failed fsync is not told from other failed writes")
		r.nemesis = slices.DeleteFunc(r.nemesis, func(f string) bool { return f == "fsync" })
	}
	if err := setupPowerloss(d, r, logf.printf); err != nil {
		return 2, err
	}
	start := time.Now()
	clock := func() int64 { return int64(time.Since(start)) }
	d.clock = clock
	// Servers first: with -secure the client agents need the agent token,
	// which exists once the servers have a leader and ACLs are
	// bootstrapped.
	for i := range d.nodes {
		if err := d.start(i); err != nil {
			return 2, err
		}
	}
	ctx := context.Background()
	l, err := d.waitLeader(ctx, 60*time.Second)
	if err != nil {
		return 2, fmt.Errorf("cluster did not come up: %w", err)
	}
	if secure != nil {
		if err := secure.bootstrap(ctx, d, l); err != nil {
			return 2, fmt.Errorf("ACL bootstrap: %w", err)
		}
		logf.printf("secure: mutual TLS on every port, gossip encrypted, ACLs on (default deny), bootstrapped")
	}
	for j := range d.clients {
		if err := d.start(d.clientIndex(j)); err != nil {
			return 2, err
		}
	}
	if err := d.waitClients(ctx, 30*time.Second); err != nil {
		return 2, fmt.Errorf("cluster did not come up: %w", err)
	}
	logf.printf("cluster up at %v", time.Since(start).Round(time.Millisecond))

	rec := &recorder{}
	wl := &workload{db: d, rec: rec, clock: clock, types: r.types, concurrency: r.concurrency, rate: r.rate, staleReads: r.staleReads, seed: r.seed}
	leases := &leaseHolders{w: wl, n: r.leaseHolders, ttl: r.leaseTTL, unsafe: r.unsafeRenewals}
	subs := &subscribers{db: d, rec: rec, clock: clock, n: r.subscribers, types: r.types, stall: 8 * time.Second}
	nm := &nemesis{db: d, net: nf, rng: rand.New(rand.NewSource(r.seed + 1)), clock: clock, fams: r.nemesis, load: wl.burst, read: wl.clientRead, logf: logf.printf}
	slow := newSlowWatcher(d, rec, clock, r.subscribers, r.seed)
	logf.printf("slow watcher (Go client, subscriber %d): stall timeout %v", r.subscribers, slow.stall)
	stubs, err := startStubPlugins(ctx, d, clock, r.types, subscriberID(r.subscribers, r.clientAgents), logf.printf)
	if err != nil {
		return 2, err
	}

	runCtx, stop := context.WithTimeout(ctx, r.timeLimit)
	defer stop()
	// Two groups: the workload and the nemesis stop at the time limit; the
	// observers (leader polling, subscribers, the slow watcher) only once
	// the cluster has healed and they have caught up.
	var running, observing sync.WaitGroup
	obsCtx, stopObs := context.WithCancel(ctx)
	defer stopObs()
	observing.Add(3)
	go func() { defer observing.Done(); observeLeaders(obsCtx, d, rec, clock) }()
	go func() { defer observing.Done(); subs.run(obsCtx) }()
	go func() { defer observing.Done(); slow.run(obsCtx) }()
	running.Add(1)
	go func() { defer running.Done(); wl.run(runCtx) }()
	if r.leaseHolders > 0 {
		running.Add(1)
		go func() { defer running.Done(); leases.run(runCtx) }()
	}
	if len(r.nemesis) > 0 {
		running.Add(1)
		go func() { defer running.Done(); nm.run(runCtx) }()
	}
	running.Wait()
	logf.printf("workload and nemesis stopped at %v; healing", time.Since(start).Round(time.Millisecond))

	end := finish(ctx, d, r, wl, nm, slow, leases, logf.printf)
	// The stub plugins: registered while they run, gone once stopped; both
	// before the SIGTERMs, which would end their sessions for them.
	target := end.watchTarget
	if len(end.live.violations) > 0 || len(end.conv.violations) > 0 {
		target = 0 // a node is stuck: the stub may follow it
	}
	end.plugins = append(stubs.checkRegistered(ctx, target), stubs.stop(ctx, rec)...)
	stopObs()
	observing.Wait()
	end.stops = d.terminateAll()
	for _, s := range end.stops {
		logf.printf("SIGTERM %s: %s after %v; hung: %v %s", s.Node, s.Status, s.Took.Round(time.Millisecond), s.Hung, s.Dump)
	}
	d.unmountLazyFS()
	d.unmountDataDirs()

	rec.leases = leases.recorded()
	res := analyse(dir, r, d, rec, nm.history(), end, logf.printf)
	if traceSink != nil {
		logf.printf("tracing: the sink took %d exports, %d bytes of spans", traceSink.Exports(), traceSink.Bytes())
		if traceSink.Exports() == 0 && res.invalid == "" {
			res.invalid = "tracing was on, yet no agent exported a span"
		}
	}
	if err := writeResults(dir, r, rec, nm.history(), res); err != nil {
		logf.printf("writing results: %v", err)
	}
	logf.printf("\n%s", res.summary)
	switch {
	case len(res.violations) > 0:
		return 1, nil
	case res.invalid != "":
		return 3, nil
	}
	return 0, nil
}
