package cluster_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/plugreg/plugreg/agent"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/cluster"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
	"github.com/plugreg/plugreg/tests/framework/testlog"
)

// Whoever made the data dir (an operator's mkdir, a chart's hostPath:
// 0755), everything a server writes in it is its own: files 0600, dirs
// 0700, those the stores make as it runs (new WAL segments, snapshots)
// and those an older release left looser; and a data dir others may list
// is warned about. raft-wal made its files 0644 and raft snapshots/ 0755,
// readable by every local user through such a dir.
func TestDataDirFilesPrivate(t *testing.T) {
	for _, store := range []string{cluster.LogStoreWAL, cluster.LogStoreBolt} {
		t.Run(store, func(t *testing.T) { testDataDirFilesPrivate(t, store) })
	}
}

func testDataDirFilesPrivate(t *testing.T, store string) {
	dir := filepath.Join(t.TempDir(), "data")
	// An operator's data dir, and what an older release left in it.
	for _, d := range []string{dir, filepath.Join(dir, "snapshots"), filepath.Join(dir, "wal")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chmod(d, 0o755) // whatever the umask
	}
	if store == cluster.LogStoreBolt {
		os.Remove(filepath.Join(dir, "wal"))
	}
	var logs testlog.Buffer
	c := testcluster.New(t, 1, testcluster.Options{Modify: func(_ int, cfg *cluster.Config) {
		cfg.DataDir, cfg.LogStore = dir, store
		cfg.WALSegmentSize = 16 << 10 // segments rotate as it runs
		cfg.SnapshotThreshold, cfg.SnapshotInterval, cfg.TrailingLogs = 50, 100*time.Millisecond, 10
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Warn})
	}})
	n := c.WaitForLeader()
	for i := range 300 {
		c.Register(n, &api.PluginInfo{Type: "csi", Name: "ebs", AllocID: fmt.Sprint(i), NodeID: "n1",
			ConnectionInfo: &api.ConnectionInfo{SocketPath: strings.Repeat("/s", 50)}})
	}
	c.Eventually(30*time.Second, "a snapshot", func() bool {
		metas, _ := filepath.Glob(filepath.Join(dir, "snapshots", "*", "meta.json"))
		for _, m := range metas {
			if !strings.HasSuffix(filepath.Dir(m), ".tmp") {
				return true // a finished snapshot, whose modes are checked
			}
		}
		return false
	})
	// A client agent's data dir (its node ID, gossip peers) likewise.
	clientDir := filepath.Join(t.TempDir(), "client")
	if err := os.Mkdir(clientDir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(clientDir, 0o755)
	var clientLogs testlog.Buffer
	c.AddClient(func(cfg *agent.Config) {
		cfg.DataDir = clientDir
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: &clientLogs, Level: hclog.Warn})
	})
	for _, d := range []struct {
		dir  string
		logs *testlog.Buffer
	}{{dir, &logs}, {clientDir, &clientLogs}} {
		checkPrivate(t, d.dir)
		if !strings.Contains(d.logs.String(), "the data dir may be listed by its group or by other users") {
			t.Errorf("%s: no warning about a data dir others may list; the log:\n%s", d.dir, d.logs.String())
		}
	}
}

// checkPrivate fails t for every file under dir not 0600 and every dir
// not 0700 (dir itself, and sockets, aside).
func checkPrivate(t *testing.T, dir string) {
	t.Helper()
	var loose []string
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil // removed while walking
		}
		want := fs.FileMode(0o600)
		switch {
		case d.IsDir() && strings.HasSuffix(path, ".tmp") && filepath.Base(filepath.Dir(path)) == "snapshots":
			// A snapshot raft is creating this instant (0755 until
			// raftx.SnapshotStore.Create tightens it, inside the private
			// snapshots dir); the finished ones are checked.
			return fs.SkipDir
		case d.IsDir():
			want = 0o700
		case !d.Type().IsRegular():
			return nil // the plugin socket keeps its own mode
		}
		if info.Mode().Perm() != want {
			loose = append(loose, fmt.Sprintf("%s %04o", strings.TrimPrefix(path, dir), info.Mode().Perm()))
		}
		return nil
	})
	if len(loose) > 0 {
		t.Errorf("%s: not the agent's alone (want files 0600, dirs 0700): %v", dir, loose)
	}
}
