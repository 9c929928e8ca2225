package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

// A scrape reads the unlabelled series asked for and reads an absent one
// as 0 (plugreg's sink drops idle series).
func TestScrapeSamples(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `# HELP plugreg_raft_leader_dispatch_log_seconds plugreg distribution
# TYPE plugreg_raft_leader_dispatch_log_seconds histogram
plugreg_raft_leader_dispatch_log_seconds_bucket{le="0.0001"} 3
plugreg_raft_leader_dispatch_log_seconds_bucket{le="+Inf"} 41
plugreg_raft_leader_dispatch_log_seconds_sum 0.0093
plugreg_raft_leader_dispatch_log_seconds_count 41
plugreg_raft_replication_append_entries_rpc_seconds_count{peer_id="n2"} 1449
`)
	}))
	defer srv.Close()
	got, err := scrapeSamples(context.Background(), srv.Client(), srv.URL, []string{plugregLeaderDispatches, plugregFollowerStores})
	if err != nil {
		t.Fatal(err)
	}
	if got[plugregLeaderDispatches] != 41 || got[plugregFollowerStores] != 0 || len(got) != 2 {
		t.Fatalf("got %v, want dispatchLog 41 and storeLogs 0", got)
	}
}

// The leader's figure is its own growth; a series that went down was
// started again and counts from 0.
func TestRaftActivityOf(t *testing.T) {
	src := metricsSource{fsyncs: []string{"a", "b"}, snapshots: []string{"s"}}
	before := []map[string]float64{{"a": 10, "b": 0, "s": 1}, {"a": 0, "b": 100}, {"a": 0, "b": 50}}
	after := []map[string]float64{{"a": 30, "b": 0, "s": 2}, {"a": 0, "b": 120}, {"a": 0, "b": 15, "s": 1}}
	got := raftActivityOf(src, before, after, 0, 0, 200)
	if got.LeaderFsyncs != 20 || got.MemberFsyncs != 55 || got.OpsPerLeaderFsync != 10 || got.Snapshots != 2 {
		t.Fatalf("got %+v, want leader 20, members 20+20+15, 10 ops per fsync, 2 snapshots", got)
	}
	if moved := raftActivityOf(src, before, after, 0, 1, 200); !moved.LeaderChanged || moved.OpsPerLeaderFsync != 0 {
		t.Fatalf("leader changed: got %+v, want no ops per fsync", moved)
	}
}

// A leader with the parallel log write counts its writer's stores, not
// its dispatches; a serial leader (no writer series) its dispatches.
func TestRaftActivityOfParallelLeaderWrites(t *testing.T) {
	src := metricsSource{fsyncs: []string{"follower"}, leaderWrites: []string{"write"}, dispatches: []string{"dispatch"}}
	before := []map[string]float64{{"dispatch": 100, "write": 40}, {"follower": 10}, {"follower": 10}}
	after := []map[string]float64{{"dispatch": 300, "write": 90}, {"follower": 60}, {"follower": 70}}
	if got := raftActivityOf(src, before, after, 0, 0, 500); got.LeaderFsyncs != 50 || got.MemberFsyncs != 160 || got.OpsPerLeaderFsync != 10 {
		t.Fatalf("parallel: got %+v, want leader 50 (its writes), members 50+50+60, 10 ops per fsync", got)
	}
	serial := []map[string]float64{{"dispatch": 300}, {"follower": 60}, {"follower": 70}}
	if got := raftActivityOf(src, before[:1:1], serial[:1:1], 0, 0, 200); got.LeaderFsyncs != 200 {
		t.Fatalf("serial: got %+v, want leader 200 (its dispatches)", got)
	}
}
