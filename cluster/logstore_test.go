package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// A new data dir gets raft-wal unless boltdb is asked for; a data dir keeps
// the store it was created with, and asking for the other kind is refused
// (it would start from an empty log beside the real one).
func TestLogStoreOfADataDir(t *testing.T) {
	cases := []struct {
		name    string
		created string // the store the dir was created with ("" for a new dir)
		ask     string
		want    string // the store opened, or "" for a refusal
		wantErr string
	}{
		{"new dir, default", "", "", LogStoreWAL, ""},
		{"new dir, wal", "", LogStoreWAL, LogStoreWAL, ""},
		{"new dir, boltdb", "", LogStoreBolt, LogStoreBolt, ""},
		{"boltdb dir, default keeps boltdb", LogStoreBolt, "", LogStoreBolt, ""},
		{"wal dir, default keeps wal", LogStoreWAL, "", LogStoreWAL, ""},
		{"boltdb dir, wal asked", LogStoreBolt, LogStoreWAL, "", "already holds a boltdb log"},
		{"wal dir, boltdb asked", LogStoreWAL, LogStoreBolt, "", "already holds a wal log"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			open := func(kind string) error {
				_, _, c, err := openStores(&Config{DataDir: dir, LogStore: kind, Logger: hclog.NewNullLogger()})
				if err == nil {
					c.Close()
				}
				return err
			}
			if tc.created != "" {
				if err := open(tc.created); err != nil {
					t.Fatalf("create with %s: %v", tc.created, err)
				}
			}
			err := open(tc.ask)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error containing %q", err, tc.wantErr)
				}
				if got := storeInDir(dir); got != tc.created {
					t.Fatalf("after the refusal the dir holds %q, want %q only", got, tc.created)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := storeInDir(dir); got != tc.want {
				t.Fatalf("dir holds %q, want %q", got, tc.want)
			}
			_, boltErr := os.Stat(filepath.Join(dir, "raft.db"))
			_, walErr := os.Stat(filepath.Join(dir, "wal"))
			if boltErr == nil && walErr == nil {
				t.Fatal("the dir holds both stores")
			}
		})
	}
}
