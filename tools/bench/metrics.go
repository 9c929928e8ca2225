package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// What each system's Raft log did during a cell, read from every member's
// Prometheus metrics before and after the cell (outside its CPU window).
// The names were checked by scraping running members (plugreg built from
// this tree, Debian's etcd 3.4).
const (
	// plugreg: hashicorp/raft's timers, as histograms in seconds
	// (telemetry's sink); a histogram's _count is its number of calls.
	// raft.leader.dispatchLog times the leader's dispatch of one batch,
	// which in a serial build is its StoreLogs of the batch (see
	// plugregLeaderWrites for a parallel one),
	// raft.rpc.appendEntries.storeLogs a follower's StoreLogs of one
	// append. With raft-wal (the default -log-store) one StoreLogs is one
	// fsync; with -log-store boltdb it is one bolt commit (itself two
	// fsyncs), so the figures then count commits. The ...Old names are
	// those of a release that exposes go-metrics' own sink (camelCase
	// summaries), for a -baseline-bin of one: a member serves one set or
	// the other, so the sum of both is its figure.
	plugregLeaderDispatches    = "plugreg_raft_leader_dispatch_log_seconds_count"
	plugregFollowerStores      = "plugreg_raft_rpc_append_entries_store_logs_seconds_count"
	plugregLeaderDispatchesOld = "plugreg_raft_leader_dispatchLog_count"
	plugregFollowerStoresOld   = "plugreg_raft_rpc_appendEntries_storeLogs_count"
	// With third_party/raft's parallel leader write, dispatchLog only
	// hands a batch to the leader's log writer, which may write several
	// batches at once: its raft.leader.storeLogs is then the leader's
	// StoreLogs. A serial build never serves it.
	plugregLeaderWrites = "plugreg_raft_leader_store_logs_seconds_count"
	// etcd: one fsync of its WAL, the Raft log, leader or follower. The
	// bbolt backend commits on its own timer (100 ms) and is not counted,
	// as plugreg's in-memory state has no such file.
	etcdWALFsyncs = "etcd_disk_wal_fsync_duration_seconds_count"

	// Snapshots a member took of its own state (a snapshot makes a cell's
	// tail slower: it writes the whole state and may compact the log).
	// plugreg: raft.snapshot.persist, timed once a snapshot was written
	// (raft.snapshot.takeSnapshot is timed on failures too). etcd: the
	// whole of a snapshot save. Neither bench cluster changes its
	// system's snapshot settings: plugreg snapshots every 8192 entries
	// (checked every 2 min), etcd 3.4 every 100,000.
	plugregSnapshots    = "plugreg_raft_snapshot_persist_seconds_count"
	plugregSnapshotsOld = "plugreg_raft_snapshot_persist_count"
	etcdSnapshots       = "etcd_debugging_snap_save_total_duration_seconds_count"
)

// metricsSource says where a system's members serve their metrics and
// which series to read there.
type metricsSource struct {
	hc   *http.Client
	urls []string // one per member, in member order
	// fsyncs are series a member's Raft log fsyncs are always the sum of
	// (a follower's stores, etcd's WAL syncs), snapshots those whose sum
	// is its snapshots. A plugreg leader's fsyncs are its log writer's
	// stores (leaderWrites) when they grew in the cell, else its
	// dispatches (a serial build's, which store as they dispatch).
	fsyncs, snapshots, leaderWrites, dispatches []string
}

// scrapeClient reads etcd's /metrics; plugreg's are read with its
// cluster's client (which speaks TLS under -tls).
var scrapeClient = &http.Client{Timeout: 5 * time.Second}

// raftActivity is what a system's Raft log did during one cell.
type raftActivity struct {
	// Leader is the member (0-based) that led when the cell started.
	Leader int `json:"leader"`
	// LeaderChanged: another member led when the cell ended; the
	// leader's figures then cover only part of the cell.
	LeaderChanged bool    `json:"leader_changed,omitempty"`
	LeaderFsyncs  float64 `json:"leader_fsyncs"`
	// MemberFsyncs is the sum over all members, the leader included.
	MemberFsyncs float64 `json:"member_fsyncs"`
	// OpsPerLeaderFsync is the cell's acknowledged writes over the
	// leader's fsyncs: how many operations one fsync covered (group
	// commit). 0 when the cell wrote nothing or the leader changed.
	OpsPerLeaderFsync float64 `json:"ops_per_leader_fsync"`
	// Snapshots counts the snapshots the members took, summed.
	Snapshots float64 `json:"snapshots"`
}

// scrapeMembers reads every member's series of src.
func scrapeMembers(ctx context.Context, src metricsSource) ([]map[string]float64, error) {
	var names []string
	for _, ns := range [][]string{src.fsyncs, src.snapshots, src.leaderWrites, src.dispatches} {
		names = append(names, ns...)
	}
	out := make([]map[string]float64, len(src.urls))
	for i, url := range src.urls {
		v, err := scrapeSamples(ctx, src.hc, url, names)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// scrapeSamples reads the unlabelled samples named in names from a
// Prometheus text endpoint. A series that is absent reads as 0: plugreg's
// go-metrics sink drops a series 60 s after its last update (and starts
// it again from 0), and one never updated has no series yet.
func scrapeSamples(ctx context.Context, hc *http.Client, url string, names []string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	want := map[string]bool{}
	out := map[string]float64{}
	for _, n := range names {
		want[n], out[n] = true, 0
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// "name value": comments and labelled series (which have a '{'
		// in the name field) never match a wanted name.
		f := strings.Fields(sc.Text())
		if len(f) < 2 || !want[f[0]] {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			return nil, fmt.Errorf("scrape %s: %s: %w", url, f[0], err)
		}
		out[f[0]] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	return out, nil
}

// counterDelta is how much a counter grew from before to after. A counter
// that went down was started again (plugreg's sink dropped an idle
// series): all of after is new.
func counterDelta(before, after float64) float64 {
	if after < before {
		return after
	}
	return after - before
}

// sumDelta is the growth of the named series of one member, summed.
func sumDelta(before, after map[string]float64, names []string) float64 {
	var sum float64
	for _, n := range names {
		sum += counterDelta(before[n], after[n])
	}
	return sum
}

// raftActivityOf turns the members' counters before and after a cell
// that made writes acknowledged writes into the cell's figures; leader
// led at its start and leaderAfter at its end.
func raftActivityOf(src metricsSource, before, after []map[string]float64, leader, leaderAfter, writes int) *raftActivity {
	a := &raftActivity{Leader: leader, LeaderChanged: leader != leaderAfter}
	for i := range before {
		d := sumDelta(before[i], after[i], src.fsyncs)
		if w := sumDelta(before[i], after[i], src.leaderWrites); w > 0 {
			d += w
		} else {
			d += sumDelta(before[i], after[i], src.dispatches)
		}
		a.MemberFsyncs += d
		if i == leader {
			a.LeaderFsyncs = d
		}
		a.Snapshots += sumDelta(before[i], after[i], src.snapshots)
	}
	if writes > 0 && a.LeaderFsyncs > 0 && !a.LeaderChanged {
		a.OpsPerLeaderFsync = float64(writes) / a.LeaderFsyncs
	}
	return a
}
