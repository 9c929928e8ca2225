package cluster_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/cluster"
	"github.com/plugreg/plugreg/internal/testing/testcluster"
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
