package cluster

import (
	"errors"
	"fmt"
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

// storeEntries appends entries from..to of term to ls, batch at a time
// (raft-wal seals a segment only at the end of an append), each about the
// size of a registration in the log (150 bytes).
func storeEntries(t *testing.T, ls raft.LogStore, from, to, term uint64, batch uint64) {
	t.Helper()
	for i := from; i <= to; i += batch {
		var b []*raft.Log
		for j := i; j <= min(i+batch-1, to); j++ {
			b = append(b, &raft.Log{Index: j, Term: term, Type: raft.LogCommand, Data: []byte(fmt.Sprintf("%0150d", j))})
		}
		if err := ls.StoreLogs(b); err != nil {
			t.Fatalf("store entries %d-%d: %v", i, min(i+batch-1, to), err)
		}
	}
}

// A follower truncates a conflicting tail (raft's "clearing log suffix")
// and appends the new leader's entries; the store must open again after,
// with every entry. raft-wal v0.4.0 marked the truncated tail segment
// sealed without writing its index block, and could not (raft-wal issue
// 31; issue 24 here: a deposed leader restarted into a crash loop). With
// small segments (the fault suite's) the truncation may also reach back
// into a sealed segment, or come just after a segment was sealed.
func TestLogStoreReopensAfterTailTruncation(t *testing.T) {
	cases := []struct {
		name  string
		store string
		size  int    // Config.WALSegmentSize
		batch uint64 // entries per append
		from  uint64 // the first entry truncated (of 1-300)
	}{
		{"default segments, the unsealed tail", LogStoreWAL, 0, 10, 296},
		{"small segments, the unsealed tail", LogStoreWAL, minWALSegmentSize, 10, 296},
		{"small segments, into a sealed segment", LogStoreWAL, minWALSegmentSize, 10, 251},
		{"small segments, just after a seal", LogStoreWAL, minWALSegmentSize, 300, 251},
		{"boltdb", LogStoreBolt, 0, 10, 251},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &Config{DataDir: t.TempDir(), LogStore: tc.store, WALSegmentSize: tc.size, Logger: hclog.NewNullLogger()}
			open := func() (raft.LogStore, io.Closer) {
				ls, _, c, err := openStores(cfg)
				if err != nil {
					t.Fatalf("open: %v", err)
				}
				return ls, c
			}
			ls, c := open()
			storeEntries(t, ls, 1, 300, 1, tc.batch)
			if err := ls.DeleteRange(tc.from, 300); err != nil {
				t.Fatal(err)
			}
			storeEntries(t, ls, tc.from, 310, 2, 10)
			check := func(ls raft.LogStore) {
				t.Helper()
				if last, err := ls.LastIndex(); err != nil || last != 310 {
					t.Fatalf("last index %d, %v; want 310", last, err)
				}
				for i := uint64(1); i <= 310; i++ {
					var l raft.Log
					want := uint64(1)
					if i >= tc.from {
						want = 2
					}
					if err := ls.GetLog(i, &l); err != nil || l.Term != want {
						t.Fatalf("entry %d: term %d, %v; want term %d", i, l.Term, err, want)
					}
				}
			}
			check(ls)
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			ls, c = open()
			defer c.Close()
			check(ls)
		})
	}
}

// raft-wal compacts a whole segment at a time and serves the unsealed
// tail segment whole: with the default segments a leader still has every
// entry of a run after a snapshot and never sends one; with small ones
// (Config.WALSegmentSize, as the fault suite runs) the compacted entries
// are gone, and a follower that needs them gets a snapshot.
func TestWALSegmentSizeCompacts(t *testing.T) {
	cases := []struct {
		size int
		gone bool // entry 10 is gone after compacting up to 900
	}{
		{0, false},
		{minWALSegmentSize, true},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("segment size %d", tc.size), func(t *testing.T) {
			ls, _, c, err := openStores(&Config{DataDir: t.TempDir(), LogStore: LogStoreWAL, WALSegmentSize: tc.size, Logger: hclog.NewNullLogger()})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			storeEntries(t, ls, 1, 1000, 1, 10)
			if err := ls.DeleteRange(1, 900); err != nil {
				t.Fatal(err)
			}
			var l raft.Log
			err = ls.GetLog(10, &l)
			if gone := errors.Is(err, raft.ErrLogNotFound); gone != tc.gone {
				t.Fatalf("entry 10 after compacting to 900: %v; want gone: %v", err, tc.gone)
			}
		})
	}
}
