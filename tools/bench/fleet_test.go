package main

import (
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
)

func validFleetOptions() *fleetOptions {
	return &fleetOptions{plugins: 20, watchers: 10, churnRate: 20, churnFor: time.Second, gossipHosts: 200,
		idle: time.Second, timeout: time.Minute, darkFor: time.Second, darkShare: 0.1}
}

// The -fleet flags: sizes must grow, scenarios must be known, and the
// hosts per process default to a tenth of the largest fleet (10 to 500),
// within the loopback addresses the bench has for host processes.
func TestFleetOptionsResolve(t *testing.T) {
	cases := []struct {
		name      string
		sizes     string
		scenarios string
		perProc   int
		wantErr   string
		wantPer   int
		wantSizes []int
	}{
		{name: "one size", sizes: "100", scenarios: "churn", wantPer: 10, wantSizes: []int{100}},
		{name: "a curve", sizes: "100, 1000,10000", scenarios: "churn,dark", wantPer: 500, wantSizes: []int{100, 1000, 10000}},
		{name: "tiny", sizes: "3", scenarios: "", wantPer: 10, wantSizes: []int{3}},
		{name: "explicit per process", sizes: "1000", scenarios: "churn", perProc: 250, wantPer: 250, wantSizes: []int{1000}},
		{name: "sizes not growing", sizes: "1000,100", scenarios: "churn", wantErr: "increasing"},
		{name: "size not a number", sizes: "1k", scenarios: "churn", wantErr: "increasing"},
		{name: "unknown scenario", sizes: "100", scenarios: "churn,meteor", wantErr: "unknown \"meteor\""},
		{name: "too many processes", sizes: "100000", scenarios: "churn", perProc: 100, wantErr: "at most 240"},
		{name: "too many hosts in one process", sizes: "5000", scenarios: "churn", perProc: 5000, wantErr: "-fleet-hosts-per-proc 5000"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := validFleetOptions()
			f.perProc = tc.perProc
			err := f.resolve(tc.sizes, tc.scenarios)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if f.hostsPerProc != tc.wantPer || len(f.sizes) != len(tc.wantSizes) || f.total() != tc.wantSizes[len(tc.wantSizes)-1] {
				t.Fatalf("got sizes %v, %d per process; want %v, %d", f.sizes, f.hostsPerProc, tc.wantSizes, tc.wantPer)
			}
		})
	}
}

// A server's count of the fleet's instances follows its events: the
// fleet's hosts only, an update counted once, a deregistration removed,
// and a reset replacing everything.
func TestFleetTrackerCounts(t *testing.T) {
	inst := func(node, alloc string) *api.PluginInfo {
		return &api.PluginInfo{Type: "fleet-csi", Name: "n", AllocID: alloc, NodeID: node}
	}
	cases := []struct {
		name   string
		events []*api.Event
		want   int64
	}{
		{name: "registrations", events: []*api.Event{
			{EventType: "registered", Info: inst(fleetHostName(1), "a")},
			{EventType: "registered", Info: inst(fleetHostName(2), "b")},
		}, want: 2},
		{name: "not the fleet's", events: []*api.Event{
			{EventType: "registered", Info: inst("fleet-bench", "m")},
		}, want: 0},
		{name: "update counted once", events: []*api.Event{
			{EventType: "registered", Info: inst(fleetHostName(1), "a")},
			{EventType: "updated", Info: inst(fleetHostName(1), "a")},
		}, want: 1},
		{name: "deregistered", events: []*api.Event{
			{EventType: "registered", Info: inst(fleetHostName(1), "a")},
			{EventType: "deregistered", Info: inst(fleetHostName(1), "a")},
		}, want: 0},
		{name: "reset replaces", events: []*api.Event{
			{EventType: "registered", Info: inst(fleetHostName(1), "a")},
			{EventType: "reset", Plugins: []*api.PluginInfo{inst(fleetHostName(2), "b"), inst(fleetHostName(3), "c"), inst("other", "d")}},
		}, want: 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr := &fleetTracker{allocs: map[string]bool{}}
			for _, ev := range tc.events {
				tr.apply(ev)
			}
			if got := tr.count.Load(); got != tc.want {
				t.Fatalf("count %d, want %d", got, tc.want)
			}
		})
	}
}
