package raftx

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// An entry reads back as raft gave it (Extensions included, the caller's
// copy untouched); one whose bytes changed is refused, and so is one past
// the checksummed boundary that carries none; entries a store held before
// it was wrapped (an upgrade) still read.
func TestChecksumStore(t *testing.T) {
	w := openWAL(t, t.TempDir(), 64<<10)
	storeEntries(t, w, 1, 10, 1, 5) // written by a release without checksums
	s, err := WithChecksums(w, w)
	if err != nil {
		t.Fatal(err)
	}
	if s.from != 11 {
		t.Fatalf("checksummed from %d, want 11", s.from)
	}
	in := &raft.Log{Index: 11, Term: 2, Type: raft.LogCommand, Data: []byte("register"), Extensions: []byte("ext")}
	if err := s.StoreLogs([]*raft.Log{in, {Index: 12, Term: 2, Type: raft.LogCommand, Data: []byte("plain")}}); err != nil {
		t.Fatal(err)
	}
	if string(in.Extensions) != "ext" {
		t.Fatalf("the caller's entry was changed: extensions %q", in.Extensions)
	}
	var out raft.Log
	for _, tc := range []struct {
		index uint64
		data  string
		ext   []byte
	}{{5, "", nil}, {11, "register", []byte("ext")}, {12, "plain", nil}} {
		if err := s.GetLog(tc.index, &out); err != nil {
			t.Fatalf("entry %d: %v", tc.index, err)
		}
		if tc.data != "" && (string(out.Data) != tc.data || !bytes.Equal(out.Extensions, tc.ext)) {
			t.Fatalf("entry %d: data %q extensions %q; want %q, %q", tc.index, out.Data, out.Extensions, tc.data, tc.ext)
		}
	}
	if !s.IsMonotonic() {
		t.Fatal("raft-wal wrapped is not monotonic")
	}

	// What the disk would hand back after damage, stored under the
	// wrapper: a changed byte, and an entry with no checksum past the
	// boundary.
	var raw raft.Log
	if err := w.GetLog(11, &raw); err != nil {
		t.Fatal(err)
	}
	raw.Index, raw.Data = 13, []byte("register")
	changed := raw
	changed.Index, changed.Data = 13, []byte("regisTer")
	if err := w.StoreLogs([]*raft.Log{&changed, {Index: 14, Term: 2, Type: raft.LogCommand, Data: []byte("bare")}}); err != nil {
		t.Fatal(err)
	}
	for _, index := range []uint64{13, 14} {
		var c *CorruptEntryError
		if err := s.GetLog(index, &out); !errors.As(err, &c) || c.Index != index {
			t.Fatalf("entry %d: %v; want it refused as damaged", index, err)
		}
	}

	// The boundary is kept: reopened, the same entries read the same way.
	again, err := WithChecksums(w, w)
	if err != nil || again.from != 11 {
		t.Fatalf("reopened: from %d, %v; want 11", again.from, err)
	}
}

// Stable values read back as written, on both stores, including those an
// older release wrote without a checksum; a changed value is refused.
func TestChecksumStableStore(t *testing.T) {
	for _, kind := range []string{"wal", "boltdb"} {
		t.Run(kind, func(t *testing.T) {
			var raw raft.StableStore
			switch kind {
			case "wal":
				raw = openWAL(t, t.TempDir(), 64<<10)
			case "boltdb":
				b, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(t.TempDir(), "raft.db")})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { b.Close() })
				raw = b
			}
			// Written by an older release, in the store's own encoding.
			if err := raw.SetUint64([]byte("CurrentTerm"), 7); err != nil {
				t.Fatal(err)
			}
			if err := raw.Set([]byte("LastVoteCand"), []byte("old")); err != nil {
				t.Fatal(err)
			}
			s := ChecksumStableStore{StableStore: raw}
			if v, err := s.GetUint64([]byte("CurrentTerm")); err != nil || v != 7 {
				t.Fatalf("an older value: %d, %v; want 7", v, err)
			}
			if v, err := s.Get([]byte("LastVoteCand")); err != nil || string(v) != "old" {
				t.Fatalf("an older value: %q, %v; want old", v, err)
			}
			if err := s.SetUint64([]byte("CurrentTerm"), 1<<40+3); err != nil {
				t.Fatal(err)
			}
			if err := s.Set([]byte("LastVoteCand"), []byte("127.0.0.1:7300")); err != nil {
				t.Fatal(err)
			}
			if v, err := s.GetUint64([]byte("CurrentTerm")); err != nil || v != 1<<40+3 {
				t.Fatalf("term: %d, %v", v, err)
			}
			if v, err := s.Get([]byte("LastVoteCand")); err != nil || string(v) != "127.0.0.1:7300" {
				t.Fatalf("vote: %q, %v", v, err)
			}
			if v, err := StableUint64(s, []byte("never set")); err != nil || v != 0 {
				t.Fatalf("unset: %d, %v; want 0", v, err)
			}
			// A byte changed on disk: the value under its checksum.
			b, err := raw.Get([]byte("CurrentTerm"))
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)-1] ^= 0x01
			if err := raw.Set([]byte("CurrentTerm"), b); err != nil {
				t.Fatal(err)
			}
			var c *CorruptValueError
			if _, err := s.GetUint64([]byte("CurrentTerm")); !errors.As(err, &c) {
				t.Fatalf("a changed term: %v; want it refused", err)
			}
			// A byte changed in the header: no checksum, and not the 8
			// bytes an older release wrote (boltdb read it as a number).
			b[0] ^= 0x01
			if err := raw.Set([]byte("CurrentTerm"), b); err != nil {
				t.Fatal(err)
			}
			if v, err := s.GetUint64([]byte("CurrentTerm")); !errors.As(err, &c) {
				t.Fatalf("a changed header: %d, %v; want it refused", v, err)
			}
		})
	}
}

// What the checksums add to an entry written and read back, against the
// store alone (an in-memory store, so that the disk does not hide it).
func BenchmarkChecksumStore(b *testing.B) {
	entry := &raft.Log{Type: raft.LogCommand, Term: 3, Data: bytes.Repeat([]byte("r"), 512)}
	for _, wrapped := range []bool{false, true} {
		name := "store"
		if wrapped {
			name = "store+checksum"
		}
		b.Run(name, func(b *testing.B) {
			inner := raft.NewInmemStore()
			var s raft.LogStore = inner
			if wrapped {
				var err error
				if s, err = WithChecksums(inner, inner); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			var out raft.Log
			for i := 0; b.Loop(); i++ {
				l := *entry
				l.Index = uint64(i + 1)
				if err := s.StoreLogs([]*raft.Log{&l}); err != nil {
					b.Fatal(err)
				}
				if err := s.GetLog(l.Index, &out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
