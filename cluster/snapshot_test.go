package cluster_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/cluster"
	"github.com/plugreg/plugreg/fsm"
	"github.com/plugreg/plugreg/registry"
	"github.com/plugreg/plugreg/snapshot"
	"github.com/plugreg/plugreg/tests/framework/testbackup"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

// backupOf is another cluster's registry of n instances and its backup.
func backupOf(t testing.TB, n int) (*fsm.State, []byte) {
	t.Helper()
	st := testbackup.Registry(t, n)
	return st, testbackup.Archive(t, st)
}

// sameContents compares two states but for their indexes.
func sameContents(a, b *fsm.State) bool {
	idx := max(a.Index(), b.Index())
	var x, y bytes.Buffer
	fsm.WriteState(&x, a.Rebased(idx))
	fsm.WriteState(&y, b.Rebased(idx))
	return bytes.Equal(x.Bytes(), y.Bytes())
}

// contents lists a state's instances in order, without their indexes:
// what a restamped restore keeps.
func contents(st *fsm.State) string {
	var b strings.Builder
	st.Walk(func(ptype, name string, list []*api.PluginInfo) bool {
		for _, p := range list {
			fmt.Fprintf(&b, "%s/%s/%s@%s:%s;", ptype, name, p.AllocID, p.NodeID, p.Version)
		}
		return true
	})
	return b.String()
}

func nodeState(n *testcluster.Node) *fsm.State { return n.Server.State() }

// A backup of 100k instances restored through a follower: every server
// applies it at one index and holds exactly the backup's contents; a
// subscriber resets once; later writes continue past it; a snapshot saved
// afterwards from a follower holds the restore and the later write.
func TestSnapshotRestoreRoundTrip(t *testing.T) {
	const instances = 100_000
	backup, archive := backupOf(t, instances)
	c := testcluster.New(t, 3, testcluster.Options{})
	f := c.Followers()[0]
	cl, err := client.New(client.Config{Addrs: []string{f.HTTPURL}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute) // 100k instances under -race on a busy machine: minutes
	defer cancel()
	for i := 0; i < 20; i++ {
		if _, err := cl.Register(ctx, &api.PluginInfo{Type: "before", Name: "x", AllocID: fmt.Sprint(i), ConnectionInfo: &api.ConnectionInfo{SocketPath: "/s"}}); err != nil {
			t.Fatal(err)
		}
	}
	before := nodeState(f).Index()
	// A subscriber on another follower, from the current index.
	other := c.Followers()[1]
	events, err := other.Server.Hub().Watch(ctx, registry.Filter{}, nodeState(other).Index())
	if err != nil {
		t.Fatal(err)
	}

	res, err := cl.SnapshotRestore(ctx, bytes.NewReader(archive))
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	if res.Result != api.ResultRestored || res.Index <= before {
		t.Fatalf("restore: %+v (state was at %d)", res, before)
	}
	c.Eventually(time.Minute, "every server at the restore", func() bool {
		for _, n := range c.Nodes {
			if nodeState(n).Index() < res.Index {
				return false
			}
		}
		return true
	})
	// The backup is from further along (index 100000) than this young
	// log: it is restamped below the restore's index, order kept.
	want := contents(backup)
	for _, n := range c.Nodes {
		st := nodeState(n)
		if st.Len() != instances || contents(st) != want || st.Instance("before", "x", "0") != nil {
			t.Fatalf("%s: %d instances at %d, not the backup's", n.Config.NodeID, st.Len(), st.Index())
		}
		if p := st.Newest("type0", "p0"); p.ModifyIndex != res.Index {
			t.Fatalf("%s: newest of type0/p0 at %d, want the restore's index %d", n.Config.NodeID, p.ModifyIndex, res.Index)
		}
		if !sameContents(st, nodeState(c.Nodes[0])) {
			t.Fatalf("%s differs from %s", n.Config.NodeID, c.Nodes[0].Config.NodeID)
		}
	}
	// One reset, at the restore's index, with the whole backup.
	var resets int
	for done := false; !done; {
		select {
		case ev := <-events:
			if ev.EventType == api.EventReset {
				resets++
				if ev.Index != res.Index || len(ev.Plugins) != instances {
					t.Fatalf("reset at %d with %d plugins; want %d and %d", ev.Index, len(ev.Plugins), res.Index, instances)
				}
			}
			if ev.Index >= res.Index {
				done = true
			}
		case <-time.After(30 * time.Second):
			t.Fatal("no event at the restore's index")
		}
	}
	if resets != 1 {
		t.Fatalf("%d resets", resets)
	}

	// Writes continue from there.
	w, err := cl.Register(ctx, &api.PluginInfo{Type: "after", Name: "y", AllocID: "1", ConnectionInfo: &api.ConnectionInfo{SocketPath: "/s"}})
	if err != nil || w.Index <= res.Index {
		t.Fatalf("write after the restore: %+v, %v", w, err)
	}
	var saved bytes.Buffer
	if err := cl.SnapshotSave(ctx, &saved, nil); err != nil {
		t.Fatalf("save: %v", err)
	}
	meta, st, err := snapshot.Decode(bytes.NewReader(saved.Bytes()))
	if err != nil {
		t.Fatalf("the saved archive: %v", err)
	}
	if meta.Index < w.Index || st.Len() != instances+1 || st.Instance("after", "y", "1") == nil || len(meta.Servers) != 3 || meta.NodeID != f.Config.NodeID {
		t.Fatalf("saved: meta %+v, %d instances", meta, st.Len())
	}

	// Changes after the save are undone by restoring it; a backup from
	// this log's past keeps its indexes exactly.
	if _, err := cl.Deregister(ctx, "after", "y", "1"); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Register(ctx, &api.PluginInfo{Type: "later", Name: "z", AllocID: "1", ConnectionInfo: &api.ConnectionInfo{SocketPath: "/s"}}); err != nil {
		t.Fatal(err)
	}
	res2, err := cl.SnapshotRestore(client.WithRequestID(ctx, "restore-2"), bytes.NewReader(saved.Bytes()))
	if err != nil {
		t.Fatalf("restore of the saved archive: %v", err)
	}
	c.Eventually(time.Minute, "every server at the second restore", func() bool {
		for _, n := range c.Nodes {
			if nodeState(n).Index() < res2.Index {
				return false
			}
		}
		return true
	})
	// The saved state exactly, indexes included, and the restore's own
	// request ID recorded in its window (a retry applies nothing).
	for _, n := range c.Nodes {
		got := nodeState(n)
		if indexedContents(got) != indexedContents(st) || got.Len() != st.Len() || got.Instance("later", "z", "1") != nil {
			t.Fatalf("%s after restoring the saved archive: not its contents", n.Config.NodeID)
		}
		if rec, ok := got.Request(cluster.RecordedRequestID("snapshot-restore", "restore-2")); !ok || rec.Index != res2.Index || rec.Result != api.ResultRestored {
			t.Fatalf("%s: the restore's request record %+v, %v", n.Config.NodeID, rec, ok)
		}
	}
}

// indexedContents lists a state's instances in order, with their indexes.
func indexedContents(st *fsm.State) string {
	var b strings.Builder
	st.Walk(func(ptype, name string, list []*api.PluginInfo) bool {
		for _, p := range list {
			fmt.Fprintf(&b, "%s/%s/%s@%s:%s[%d,%d];", ptype, name, p.AllocID, p.NodeID, p.Version, p.CreateIndex, p.ModifyIndex)
		}
		return true
	})
	return b.String()
}

// A truncated, corrupted, foreign or newer archive is refused with a 400
// that says which, and no server's state or log moves.
func TestSnapshotRestoreRefusals(t *testing.T) {
	_, good := backupOf(t, 500)
	c := testcluster.New(t, 3, testcluster.Options{})
	cl, _ := client.New(client.Config{Addrs: []string{c.Leader().HTTPURL}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cl.Register(ctx, &api.PluginInfo{Type: "t", Name: "x", AllocID: "1", ConnectionInfo: &api.ConnectionInfo{SocketPath: "/s"}}); err != nil {
		t.Fatal(err)
	}
	newer := rewriteVersion(t, good)
	// Every node at the register's index first: a follower still
	// applying it would look like a refusal that changed something.
	c.Eventually(30*time.Second, "every node at the same index", func() bool {
		idx := c.Nodes[0].Server.AppliedIndex()
		for _, n := range c.Nodes {
			if n.Server.AppliedIndex() != idx || nodeState(n).Instance("t", "x", "1") == nil {
				return false
			}
		}
		return true
	})
	flipped := append([]byte(nil), good...)
	flipped[len(flipped)/2] ^= 0x10
	cases := []struct {
		name string
		body []byte
		want string
	}{
		{"truncated", good[:len(good)*2/3], "truncated"},
		{"cut in the gzip trailer", good[:len(good)-3], "truncated"},
		{"corrupted", flipped, "snapshot archive"},
		{"foreign", []byte("PK\x03\x04 a zip file"), "not a plugreg snapshot"},
		{"empty", nil, "not a plugreg snapshot"},
		{"newer", newer, "written by a newer plugreg"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			idx := map[string]uint64{}
			for _, n := range c.Nodes {
				idx[n.Config.NodeID] = n.Server.AppliedIndex()
			}
			req, _ := http.NewRequest(http.MethodPut, c.Followers()[0].HTTPURL+"/v1/operator/snapshot", bytes.NewReader(tc.body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 400 || !strings.Contains(string(body), `"invalid"`) || !strings.Contains(string(body), tc.want) {
				t.Fatalf("%d %s; want 400 invalid saying %q", resp.StatusCode, body, tc.want)
			}
			time.Sleep(100 * time.Millisecond) // anything proposed would have applied by now
			for _, n := range c.Nodes {
				if got := n.Server.AppliedIndex(); got != idx[n.Config.NodeID] || nodeState(n).Instance("t", "x", "1") == nil {
					t.Fatalf("%s moved from %d to %d", n.Config.NodeID, idx[n.Config.NodeID], got)
				}
			}
		})
	}
}

// rewriteVersion rewrites an archive's meta.json to the next version,
// with matching checksums: a newer plugreg's archive, whole.
func rewriteVersion(t *testing.T, archive []byte) []byte {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(archive))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	files := map[string][]byte{}
	var names []string
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		b, _ := io.ReadAll(tr)
		files[h.Name] = b
		names = append(names, h.Name)
	}
	files["meta.json"] = bytes.Replace(files["meta.json"], []byte(fmt.Sprintf(`"Version": %d`, snapshot.Version)), []byte(fmt.Sprintf(`"Version": %d`, snapshot.Version+1)), 1)
	files["SHA256SUMS"] = []byte(fmt.Sprintf("%x  meta.json\n%x  state.bin\n", sha256.Sum256(files["meta.json"]), sha256.Sum256(files["state.bin"])))
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, n := range names {
		tw.WriteHeader(&tar.Header{Name: n, Mode: 0o600, Size: int64(len(files[n])), Typeflag: tar.TypeReg})
		tw.Write(files[n])
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

// The leader is killed while a restore is under way, at a few moments:
// whichever the outcome, the cluster converges on one of them (never half,
// never a node alone with it), an acknowledged restore is there, and
// writes go on after.
func TestSnapshotRestoreLeaderKilled(t *testing.T) {
	backup, archive := backupOf(t, 30_000)
	for _, delay := range []time.Duration{0, 200 * time.Millisecond, time.Second} {
		t.Run(delay.String(), func(t *testing.T) { restoreWithLeaderKilled(t, backup, archive, delay) })
	}
}

func restoreWithLeaderKilled(t *testing.T, backup *fsm.State, archive []byte, delay time.Duration) {
	c := testcluster.New(t, 3, testcluster.Options{})
	f := c.Followers()[0]
	cl, _ := client.New(client.Config{Addrs: []string{f.HTTPURL}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := cl.Register(ctx, &api.PluginInfo{Type: "before", Name: "x", AllocID: "1", ConnectionInfo: &api.ConnectionInfo{SocketPath: "/s"}}); err != nil {
		t.Fatal(err)
	}
	pre := nodeState(f)
	leader := -1
	for i, n := range c.Nodes {
		if n.Server.IsLeader() {
			leader = i
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := cl.SnapshotRestore(ctx, bytes.NewReader(archive))
		done <- err
	}()
	time.Sleep(delay)
	c.Kill(leader)
	err := <-done
	c.Restart(leader)
	c.WaitForLeader()
	w, werr := cl.Register(ctx, &api.PluginInfo{Type: "after", Name: "y", AllocID: "1", ConnectionInfo: &api.ConnectionInfo{SocketPath: "/s"}})
	if werr != nil {
		t.Fatalf("a write after: %v", werr)
	}
	c.Eventually(time.Minute, "every server at the write after", func() bool {
		for _, n := range c.Nodes {
			if nodeState(n).Index() < w.Index {
				return false
			}
		}
		return true
	})
	ref := nodeState(c.Nodes[0])
	for _, n := range c.Nodes[1:] {
		if !sameContents(nodeState(n), ref) {
			t.Fatalf("%s and %s differ", n.Config.NodeID, c.Nodes[0].Config.NodeID)
		}
	}
	restored := ref.Instance("before", "x", "1") == nil
	switch {
	case restored && ref.Len() == backup.Len()+1 && strings.Contains(contents(ref), contents(backup)):
		t.Logf("leader killed after %v: the restore committed (answer: %v)", delay, err)
	case !restored && ref.Len() == pre.Len()+1:
		if err == nil {
			t.Fatal("the restore was acknowledged but is not in the state")
		}
		t.Logf("leader killed after %v: the restore did not commit (answer: %v)", delay, err)
	default:
		t.Fatalf("neither outcome: %d instances, restored %v", ref.Len(), restored)
	}
}

// A client agent passes snapshots on to a server both ways.
func TestSnapshotThroughClientAgent(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	cn := c.AddClient(nil)
	cl, _ := client.New(client.Config{Addrs: []string{cn.HTTPURL}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c.Eventually(30*time.Second, "the client agent reaching a server", func() bool {
		_, err := cl.Register(ctx, &api.PluginInfo{Type: "t", Name: "x", AllocID: "1", ConnectionInfo: &api.ConnectionInfo{SocketPath: "/s"}})
		return err == nil
	})
	var saved bytes.Buffer
	if err := cl.SnapshotSave(ctx, &saved, nil); err != nil {
		t.Fatalf("save through the client agent: %v", err)
	}
	if _, err := cl.Register(ctx, &api.PluginInfo{Type: "t", Name: "x", AllocID: "2", ConnectionInfo: &api.ConnectionInfo{SocketPath: "/s"}}); err != nil {
		t.Fatal(err)
	}
	res, err := cl.SnapshotRestore(ctx, bytes.NewReader(saved.Bytes()))
	if err != nil || res.Result != api.ResultRestored {
		t.Fatalf("restore through the client agent: %+v, %v", res, err)
	}
	inst, _, err := cl.Instances(ctx, "t", "x", nil)
	if err != nil || len(inst) != 1 || inst[0].AllocID != "1" {
		t.Fatalf("after the restore: %v, %v", inst, err)
	}
	// A damaged archive is refused on the server, as an invalid request.
	if _, err := cl.SnapshotRestore(ctx, bytes.NewReader(saved.Bytes()[:100])); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("a truncated archive through the client agent: %v", err)
	}
}

// A restore resent with its request ID (what client.SnapshotRestore does
// when it retries after a lost answer) applies once, through a follower's
// HTTP API and through a client agent's: the write acknowledged between
// the two copies is still there, and the retry answers the first copy's
// index. Before the restore carried a request ID, the second copy
// installed the backup again over that write.
func TestSnapshotRestoreRetryAppliesOnce(t *testing.T) {
	_, archive := backupOf(t, 50)
	c := testcluster.New(t, 3, testcluster.Options{})
	cn := c.AddClient(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, via := range []struct{ name, url string }{{"follower", c.Followers()[0].HTTPURL}, {"client agent", cn.HTTPURL}} {
		t.Run(via.name, func(t *testing.T) {
			cl, err := client.New(client.Config{Addrs: []string{via.url}})
			if err != nil {
				t.Fatal(err)
			}
			rctx := client.WithRequestID(ctx, "restore-via-"+strings.ReplaceAll(via.name, " ", "-"))
			first, err := cl.SnapshotRestore(rctx, bytes.NewReader(archive))
			if err != nil {
				t.Fatalf("restore: %v", err)
			}
			between, err := cl.Register(ctx, &api.PluginInfo{Type: "between", Name: "x", AllocID: "1", ConnectionInfo: &api.ConnectionInfo{SocketPath: "/s"}})
			if err != nil {
				t.Fatal(err)
			}
			again, err := cl.SnapshotRestore(rctx, bytes.NewReader(archive))
			if err != nil {
				t.Fatalf("the retry: %v", err)
			}
			if again.Index != first.Index || again.Result != api.ResultRestored {
				t.Fatalf("the retry answered %+v, want the first restore's index %d", again, first.Index)
			}
			c.Eventually(time.Minute, "every server past the write", func() bool {
				for _, n := range c.Nodes {
					if nodeState(n).Index() < between.Index {
						return false
					}
				}
				return true
			})
			for _, n := range c.Nodes {
				if nodeState(n).Instance("between", "x", "1") == nil {
					t.Fatalf("%s lost the write acknowledged at %d between the restore and its retry", n.Config.NodeID, between.Index)
				}
			}
		})
	}
}
