package main

import (
	"fmt"
	"io"
	"strings"
)

// printFleet prints the -fleet mode's figures: one column per fleet size,
// then the scenarios run at the last size.
func printFleet(w io.Writer, rep *report) {
	r := rep.Fleet
	pf := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	pf("plugreg fleet simulator %s, %d CPUs, %s: %d hosts x %d plugins, %d per host process, %d gossiping (the rest: static server list), %d watchers; load average %s at start, %s at end\n\n",
		rep.Date, rep.CPUs, rep.GoVersion, r.Hosts, r.Plugins, r.HostsPerProc, r.GossipHosts, r.Watchers, r.LoadAvgStart, r.LoadAvgEnd)
	row := func(label string, cell func(s *fleetStep) string) {
		pf("%-52s", label)
		for _, s := range r.Steps {
			pf(" %14s", cell(s))
		}
		pf("\n")
	}
	f1 := func(v float64) string { return fmt.Sprintf("%.1f", v) }
	f2 := func(v float64) string { return fmt.Sprintf("%.2f", v) }
	f3 := func(v float64) string { return fmt.Sprintf("%.3f", v) }
	churn := func(get func(c *fleetChurn) string) func(s *fleetStep) string {
		return func(s *fleetStep) string {
			if s.Churn == nil {
				return "-"
			}
			return get(s.Churn)
		}
	}
	row("hosts", func(s *fleetStep) string { return fmt.Sprint(s.Hosts) })
	pf("%s\n", strings.Repeat("-", 52+15*len(r.Steps)))
	row("instances", func(s *fleetStep) string { return fmt.Sprint(s.Instances) })
	row("new hosts started at once (gossiping in all)", func(s *fleetStep) string { return fmt.Sprintf("%d (%d)", s.NewHosts, s.GossipHosts) })
	row("start: host processes and clients up, s", func(s *fleetStep) string { return f2(s.SpawnSeconds) })
	row("start: every instance listed on every server, s", func(s *fleetStep) string { return f2(s.ListedEvery) })
	row("start: write p50 / p99, ms", func(s *fleetStep) string { return f1(s.StartWriteP50Ms) + " / " + f1(s.StartWriteP99Ms) })
	row("start: writes failed (anti-entropy redid them)", func(s *fleetStep) string { return fmt.Sprint(s.StartWriteErrors) })
	row("start: leader CPU per new instance, ms", func(s *fleetStep) string { return f3(s.StartLeaderCPUPerW) })
	row("rest: host CPU per host, ms/s", func(s *fleetStep) string { return f3(s.HostIdleCPUMsPerSec) })
	row("rest: host process RSS per host, KiB", func(s *fleetStep) string { return f1(s.HostRSSBytesEach / 1024) })
	row("rest: leader CPU, ms/s", func(s *fleetStep) string { return f1(s.LeaderIdleCPUMsPerSec) })
	row("rest: server RSS per instance (vs empty), B", func(s *fleetStep) string { return fmt.Sprintf("%.0f", s.ServerRSSPerInstance) })
	row("rest: server live heap per instance (vs empty), B", func(s *fleetStep) string { return fmt.Sprintf("%.0f", s.ServerHeapPerInstance) })
	row("rest: upstreams open (one per host)", func(s *fleetStep) string { return fmt.Sprint(s.StartUpstreams) })
	row("churn: servers' live heap per watcher (all three), B", func(s *fleetStep) string { return fmt.Sprintf("%.0f", s.WatcherHeapBytesEach) })
	row("churn: writes (errors)", churn(func(c *fleetChurn) string { return fmt.Sprintf("%d (%d)", c.Writes, c.Errors) }))
	row("churn: write p50 / p99, ms", churn(func(c *fleetChurn) string { return f1(c.WriteP50) + " / " + f1(c.WriteP99) }))
	row("churn: commit -> last watcher p50 / p99, ms (lower bound)", churn(func(c *fleetChurn) string { return f1(c.AckToLastP50) + " / " + f1(c.AckToLastP99) }))
	row("churn: write start -> last watcher p99, ms (upper bound)", churn(func(c *fleetChurn) string { return f1(c.StartToLastP99) }))
	row("churn: writes not at every watcher", churn(func(c *fleetChurn) string { return fmt.Sprint(c.Undelivered) }))
	row("churn: leader CPU per write, ms", churn(func(c *fleetChurn) string { return f2(c.LeaderCPUPerWrite) }))
	row("churn: leader CPU per write less rest, ms", churn(func(c *fleetChurn) string { return f2(c.LeaderMarginalCPUPerWrite) }))
	pf("\nat %d hosts:\n", r.Hosts)
	if r.WatcherHeapBytesEach != 0 {
		pf("  servers' live heap per watcher (all three): %.0f B\n", r.WatcherHeapBytesEach)
	}
	if r.SnapshotBytes > 0 {
		pf("  snapshot save from the leader: %.2f MiB in %.2f s\n", float64(r.SnapshotBytes)/(1<<20), r.SnapshotSeconds)
	}
	for _, rec := range []*fleetRecovery{r.Restart, r.Failover} {
		if rec == nil {
			continue
		}
		pf("  %s: ", rec.What)
		if rec.ReadySeconds > 0 {
			pf("every server ready with its data %.2f s; ", rec.ReadySeconds)
		}
		if rec.FirstWriteSeconds > 0 {
			pf("first acknowledged write %.2f s; ", rec.FirstWriteSeconds)
		}
		pf("every host's upstream resumed %.2f s; resets sent: %d to hosts, %d to watchers; instances listed per server %v\n",
			rec.ResumedSeconds, rec.HostResets, rec.WatcherResets, rec.Listed)
	}
	if d := r.Dark; d != nil {
		pf("  %d hosts dark (%d gossiping) for %.0f s: %d gossiping marked not alive; churn meanwhile p99 %.1f ms, commit -> last watcher p99 (lower bound) %.1f ms; upstreams back %.2f s and gossip hosts alive %.2f s after SIGCONT; listed then %v (reaped ones missing), every instance listed again %.2f s after SIGCONT\n",
			d.Hosts, d.GossipHosts, d.Seconds, d.MarkedNotAlive, d.Churn.WriteP99, d.Churn.AckToLastP99, d.ResumedSeconds, d.AliveSeconds, d.InstancesListed, d.RelistedSeconds)
	}
	if k := r.Steps[len(r.Steps)-1].Storm; k != nil {
		pf("  leader killed -9 in the start storm at %.2f s (%d instances listed then), restarted at %.2f s: every instance listed on every server after %.2f s\n",
			k.KilledAtSeconds, k.ListedAtKill, k.RestartedAtSeconds, r.Steps[len(r.Steps)-1].ListedEvery)
	}
	if ro := r.Rolling; ro != nil {
		pf("  rolling restart of the agents, %d host processes (%d hosts) one at a time: %.1f s in all, per process p50 %.2f s max %.2f s (SIGTERM to every host's upstream delivering); fewest instances listed %d of %d; start writes p50 %.1f ms p99 %.1f ms, %d failed; %d resets to hosts; listed after %v\n",
			ro.Procs, ro.Hosts, ro.TotalSeconds, ro.PerProcP50Seconds, ro.PerProcMaxSeconds, ro.FewestListed, ro.Hosts*r.Plugins, ro.StartWriteP50Ms, ro.StartWriteP99Ms, ro.StartWriteErrs, ro.HostResets, ro.Listed)
	}
	pf("  false suspicions (gossiping hosts seen not alive by a server before any fault, over the starts and churns): %d of %d\n", r.FalseSuspicions, r.GossipHosts)
	for _, n := range r.Notes {
		pf("note: %s\n", n)
	}
}
