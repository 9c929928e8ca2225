package raftx

import (
	"bytes"
	"errors"
	"testing"

	"github.com/hashicorp/raft"
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
