package raftx

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// The snapshots raft would pass over without a word stop the server; the
// ones it keeps as they are (three after a crash between a new snapshot
// and the removal of the oldest; an older one that cannot be read) do not.
func TestSnapshotsRaftWouldPassOver(t *testing.T) {
	for _, tc := range []struct {
		name    string
		damage  func(t *testing.T, dir string, ids []string)
		refused bool
	}{
		{"three whole", func(*testing.T, string, []string) {}, false},
		{"the oldest meta.json garbage", func(t *testing.T, dir string, ids []string) {
			writeFile(t, filepath.Join(dir, "snapshots", ids[0], "meta.json"), "{garbage")
		}, false},
		{"the newest meta.json garbage", func(t *testing.T, dir string, ids []string) {
			writeFile(t, filepath.Join(dir, "snapshots", ids[2], "meta.json"), "{garbage")
		}, true},
		{"the newest state.bin changed", func(t *testing.T, dir string, ids []string) {
			path := filepath.Join(dir, "snapshots", ids[2], "state.bin")
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 1
			writeFile(t, path, string(b))
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			store, err := raft.NewFileSnapshotStoreWithLogger(dir, 3, hclog.NewNullLogger())
			if err != nil {
				t.Fatal(err)
			}
			_, trans := raft.NewInmemTransport("")
			defer trans.Close()
			conf := raft.Configuration{Servers: []raft.Server{{ID: "n1", Address: trans.LocalAddr(), Suffrage: raft.Voter}}}
			var ids []string
			for _, index := range []uint64{10, 20, 30} {
				sink, err := store.Create(raft.SnapshotVersionMax, index, 1, conf, 1, trans)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := sink.Write([]byte("state of the registry")); err != nil {
					t.Fatal(err)
				}
				if err := sink.Close(); err != nil {
					t.Fatal(err)
				}
				ids = append(ids, sink.ID())
			}
			tc.damage(t, dir, ids)
			err = CheckSnapshots(dir)
			var se *SnapshotError
			if tc.refused != errors.As(err, &se) {
				t.Fatalf("refused: %v (%v); want refused %v", err != nil, err, tc.refused)
			}
		})
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
