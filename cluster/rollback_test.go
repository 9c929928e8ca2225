package cluster_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/cluster"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

// A follower whose data dir is put back to a copy taken 50 acknowledged
// writes earlier is refused at start, before Raft (which would vote with
// the votes and entries the copy forgot), in one StoreError that says
// what happened; emptied and started again, as docs/operations.md says,
// it rejoins and catches up.
func TestRolledBackDataDirRefused(t *testing.T) {
	for _, store := range []string{cluster.LogStoreWAL, cluster.LogStoreBolt} {
		t.Run(store, func(t *testing.T) {
			c := testcluster.New(t, 3, testcluster.Options{Modify: func(_ int, cfg *cluster.Config) { cfg.LogStore = store }})
			leader := c.WaitForLeader()
			for i := 0; i < 10; i++ {
				c.Register(leader, plugin(fmt.Sprintf("before-%d", i), "a1"))
			}
			victim := c.Followers()[0]
			vi := nodeIndex(c, victim)
			id := victim.Config.NodeID
			dir := victim.Config.DataDir
			c.Kill(vi)
			old := t.TempDir() + "/copy"
			if err := os.CopyFS(old, os.DirFS(dir)); err != nil {
				t.Fatal(err)
			}
			c.Restart(vi)
			victim = c.Nodes[vi]
			var last uint64
			for i := 0; i < 50; i++ {
				last = c.Register(c.WaitForLeader(), plugin(fmt.Sprintf("after-%d", i), "a1")).Index
			}
			c.Eventually(30*time.Second, "the others recorded the victim's progress", func() bool {
				for _, n := range c.Running() {
					if n != victim && n.AckRecorded(id) < last {
						return false
					}
				}
				return true
			})
			c.Kill(vi)
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			if err := os.CopyFS(dir, os.DirFS(old)); err != nil {
				t.Fatal(err)
			}
			cfg := *victim.Config
			cfg.Join = nil
			srv, err := cluster.New(&cfg)
			if err == nil {
				srv.Shutdown()
				t.Fatal("a server started on a data dir put back 50 writes")
			}
			var se *cluster.StoreError
			if !errors.As(err, &se) || !strings.Contains(err.Error(), "the data dir went back") {
				t.Fatalf("refused with %v, want a StoreError saying the data dir went back", err)
			}
			t.Logf("refused: %v", err)

			// The recovery: removed, emptied, started again.
			if err := c.WaitForLeader().RemovePeer(id); err != nil {
				t.Fatal(err)
			}
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			c.Restart(vi)
			victim = c.Nodes[vi]
			c.Eventually(60*time.Second, "the emptied server caught up", func() bool { return victim.AppliedIndex() >= last })
		})
	}
}

// A report is recorded only for a server of the Raft configuration: a
// peer that makes names up cannot fill the stable store with records.
// A probe, which records nothing, may name anyone.
func TestAckReportsRecordedOnlyForServers(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	leader := c.WaitForLeader()
	member := c.Followers()[0].Config.NodeID
	// As the reporter gets it back over the wire (transport sends it as
	// api.ToWire makes it).
	if err := leader.ReportAck("nosuch", "inc-1", 5, false); err == nil || !errors.Is(api.ToWire(err).(*api.WireError).Err(), api.ErrPermissionDenied) {
		t.Fatalf("a report for a node outside the configuration: %v, want permission denied", err)
	}
	if got := leader.AckRecorded("nosuch"); got != 0 {
		t.Fatalf("recorded %d for a node outside the configuration", got)
	}
	if err := leader.ReportAck("nosuch", "inc-1", 5, true); err != nil {
		t.Fatalf("a probe for a node outside the configuration: %v", err)
	}
	if err := leader.ReportAck(member, "inc-2", 1<<40, false); err != nil {
		t.Fatalf("a report for %s: %v", member, err)
	}
	if got := leader.AckRecorded(member); got != 1<<40 {
		t.Fatalf("recorded %d for %s, want %d", got, member, uint64(1<<40))
	}
}
