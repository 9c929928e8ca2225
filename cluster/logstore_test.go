package cluster

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
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

// A log whose tail was truncated (what a deposed leader's log goes through
// when the new leader clears its uncommitted suffix) must open again, take
// new entries, seal full segments and open again, on both stores.
// raft-wal v0.4.0 marked the truncated segment sealed without writing its
// index block, and the next open failed with "sealed segment has no index
// block" (hashicorp/raft-wal issue 31, fixed in v0.4.1 by PR 33): every
// restart of such a server then panicked in raft.NewRaft.
func TestLogStoreReopensAfterTailTruncation(t *testing.T) {
	// Entries big enough that a few dozen fill a segment, so the steps
	// below cross segment boundaries as a busy server's log does.
	const entrySize = 256 << 10
	perSegment := walSegmentSize / entrySize
	steps := []struct {
		name      string
		append    int    // entries appended after the last index
		truncFrom uint64 // DeleteRange(truncFrom, last) when > 0
		wantFirst uint64
		wantLast  uint64
	}{
		{name: "append in the first segment", append: 10, wantFirst: 1, wantLast: 10},
		{name: "truncate the tail in the active segment", truncFrom: 8, wantFirst: 1, wantLast: 7},
		{name: "append after the truncation", append: 5, wantFirst: 1, wantLast: 12},
		{name: "append past a segment boundary", append: perSegment + 3, wantFirst: 1, wantLast: uint64(12 + perSegment + 3)},
		{name: "truncate back across the boundary", truncFrom: uint64(perSegment - 2), wantFirst: 1, wantLast: uint64(perSegment - 3)},
		{name: "append and seal again", append: 2*perSegment + 1, wantFirst: 1, wantLast: uint64(3*perSegment - 2)},
		{name: "truncate one entry", truncFrom: uint64(3*perSegment - 2), wantFirst: 1, wantLast: uint64(3*perSegment - 3)},
	}
	for _, kind := range []string{LogStoreWAL, LogStoreBolt} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			open := func() (raft.LogStore, io.Closer) {
				t.Helper()
				logs, _, c, err := openStores(&Config{DataDir: dir, LogStore: kind, Logger: hclog.NewNullLogger()})
				if err != nil {
					t.Fatalf("open %s: %v", kind, err)
				}
				return logs, c
			}
			check := func(logs raft.LogStore, first, last uint64) {
				t.Helper()
				if got, err := logs.FirstIndex(); err != nil || got != first {
					t.Fatalf("first index %d (%v), want %d", got, err, first)
				}
				if got, err := logs.LastIndex(); err != nil || got != last {
					t.Fatalf("last index %d (%v), want %d", got, err, last)
				}
				for _, i := range []uint64{first, (first + last) / 2, last} {
					var l raft.Log
					if err := logs.GetLog(i, &l); err != nil {
						t.Fatalf("get %d: %v", i, err)
					}
					if l.Index != i || len(l.Data) != entrySize || l.Data[0] != byte(i) {
						t.Fatalf("entry %d reads back as index %d, %d bytes", i, l.Index, len(l.Data))
					}
				}
			}
			var last uint64
			for _, st := range steps {
				logs, c := open()
				if st.append > 0 {
					batch := make([]*raft.Log, 0, 8)
					for i := 0; i < st.append; i++ {
						last++
						data := make([]byte, entrySize)
						data[0] = byte(last)
						batch = append(batch, &raft.Log{Index: last, Term: 1, Type: raft.LogCommand, Data: data})
						if len(batch) == cap(batch) || i == st.append-1 {
							if err := logs.StoreLogs(batch); err != nil {
								t.Fatalf("%s: store: %v", st.name, err)
							}
							batch = batch[:0]
						}
					}
				}
				if st.truncFrom > 0 {
					if err := logs.DeleteRange(st.truncFrom, last); err != nil {
						t.Fatalf("%s: delete %d-%d: %v", st.name, st.truncFrom, last, err)
					}
					last = st.truncFrom - 1
				}
				check(logs, st.wantFirst, st.wantLast)
				if err := c.Close(); err != nil {
					t.Fatalf("%s: close: %v", st.name, err)
				}
				// The reopen is what failed: every step ends with one.
				logs, c = open()
				check(logs, st.wantFirst, st.wantLast)
				c.Close()
			}
		})
	}
}
