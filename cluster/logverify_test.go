package cluster_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/plugreg/plugreg/cluster"
	"github.com/plugreg/plugreg/cluster/raftx"
	"github.com/plugreg/plugreg/internal/testing/testcluster"
	"github.com/plugreg/plugreg/internal/testing/testlog"
)

// A follower whose log holds another entry than the leader's at a
// committed index, every entry passing its own checksum (a store that
// wrote the wrong block, a data dir put together from pieces), applies it
// and diverges; the next log checkpoint finds it: that follower, and only
// it, says its log differs from the leader's over the range holding the
// entry.
func TestFollowerLogDifferingFromTheLeadersIsFound(t *testing.T) {
	logs := make([]*testlog.Buffer, 3)
	c := testcluster.New(t, 3, testcluster.Options{Modify: func(i int, cfg *cluster.Config) {
		cfg.LogVerifyInterval = -1 // the test appends the checkpoints
		logs[i] = new(testlog.Buffer)
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: cfg.NodeID, Level: hclog.Error, Output: logs[i]})
	}})
	leader := c.Leader()
	appliedEverywhere := func(what string, index uint64) {
		t.Helper()
		c.Eventually(30*time.Second, what, func() bool {
			for _, n := range c.Running() {
				if n.AppliedIndex() < index {
					return false
				}
			}
			return true
		})
	}
	checkpoint := func() {
		t.Helper()
		if err := leader.AppendLogCheckpoint(); err != nil {
			t.Fatal(err)
		}
		appliedEverywhere("the checkpoint", leader.AppliedIndex())
	}
	c.Register(leader, plugin("before", "a"))
	checkpoint()
	victim := c.Register(leader, plugin("victim", "a"))
	appliedEverywhere("the victim", victim.Index)

	fi := -1
	for i, n := range c.Nodes {
		if n != leader {
			fi = i
			break
		}
	}
	f := c.Nodes[fi]
	c.Kill(fi)
	rewriteEntry(t, f.Config.DataDir, victim.Index, func(data []byte) []byte {
		return bytes.Replace(data, []byte("victim"), []byte("victiM"), 1)
	})
	c.Restart(fi)
	f = c.Nodes[fi]
	appliedEverywhere("the restarted follower", leader.AppliedIndex())
	if f.State().Instance("csi", "victiM", "a") == nil {
		t.Fatal("setup: the follower did not apply the changed entry")
	}
	for i := range logs {
		if strings.Contains(logs[i].String(), "differs from the leader's") {
			t.Fatalf("node %d reports a difference before the checkpoint: %s", i, logs[i])
		}
	}

	checkpoint()
	c.Eventually(30*time.Second, "the follower to report its log", func() bool {
		return strings.Contains(logs[fi].String(), "this server's log differs from the leader's")
	})
	for i := range logs {
		if i != fi && strings.Contains(logs[i].String(), "differs from the leader's") {
			t.Errorf("node %d, whose log is the leader's, reports a difference: %s", i, logs[i])
		}
	}
	for _, l := range strings.Split(logs[fi].String(), "\n") {
		if strings.Contains(l, "differs from the leader's") {
			t.Logf("the follower said: %s", l)
		}
	}
}

// rewriteEntry replaces entry index of the stopped server's raft-wal log
// with change(its data), written as the server writes entries (with a
// valid checksum), keeping the entries after it.
func rewriteEntry(t *testing.T, dataDir string, index uint64, change func([]byte) []byte) {
	t.Helper()
	w, err := raftx.OpenWAL(dataDir+"/wal", 16<<20, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	logs, err := raftx.WithChecksums(w, w)
	if err != nil {
		t.Fatal(err)
	}
	last, err := logs.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	var tail []*raft.Log
	for i := index; i <= last; i++ {
		l := new(raft.Log)
		if err := logs.GetLog(i, l); err != nil {
			t.Fatal(err)
		}
		tail = append(tail, l)
	}
	changed := change(tail[0].Data)
	if bytes.Equal(changed, tail[0].Data) {
		t.Fatalf("entry %d unchanged", index)
	}
	tail[0].Data = changed
	if err := logs.DeleteRange(index, last); err != nil {
		t.Fatal(err)
	}
	if err := logs.StoreLogs(tail); err != nil {
		t.Fatal(err)
	}
}
