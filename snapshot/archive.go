// Package snapshot is the backup archive of a registry: the FSM's snapshot
// stream (fsm.WriteState) and what it was taken from, in one file that
// says when it is not whole.
//
// The archive is a gzipped tar, as Consul's `snapshot save` writes, with
// three members in this order:
//
//	meta.json    Meta: the format, its version, index, term, the Raft
//	             configuration, the state's size and SHA-256
//	state.bin    the fsm.WriteState stream
//	SHA256SUMS   sha256sum(1) lines for meta.json and state.bin
//
// so `tar xzf` and `sha256sum -c SHA256SUMS` check one by hand. Read
// refuses a truncated, corrupted, foreign or newer archive before anything
// is decoded for use, and every refusal wraps api.ErrInvalid.
package snapshot

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/fsm"
)

// Format names a plugreg snapshot archive in its meta.json.
const Format = "plugreg-snapshot"

// Version is the archive version this binary writes and the newest it
// reads. A reader refuses a newer one: it cannot know what it would drop.
const Version = 1

// MaxSize bounds an archive's state when reading (and so what an agent
// buffers for a restore): far above a registry of a million instances
// (about 300 MB of state).
const MaxSize = 2 << 30

const (
	metaName  = "meta.json"
	stateName = "state.bin"
	sumsName  = "SHA256SUMS"
	// maxMeta bounds meta.json and SHA256SUMS.
	maxMeta = 1 << 20
)

// Server is one member of the Raft configuration the snapshot was taken
// in.
type Server struct {
	ID      string
	Address string
	Voter   bool
}

// Meta describes an archive.
type Meta struct {
	Format  string
	Version int
	// Index is the registry's applied index, Term the Raft term of the
	// node that took it when it did, Servers its Raft configuration.
	Index   uint64
	Term    uint64
	Servers []Server
	// NodeID took it, at Created.
	NodeID  string
	Created time.Time
	// StateSize and StateSHA256 are state.bin's.
	StateSize   int64
	StateSHA256 string
}

// Encode writes the archive of state to w without holding its stream in
// memory: meta.json comes first and carries the stream's size and
// SHA-256, so the stream is written twice, to a hash and then into the
// archive. The state is immutable, so both passes write the same bytes
// (WriteState's output is a function of the state); a difference would
// fail the archive's own checks.
func Encode(w io.Writer, meta Meta, state *fsm.State) error {
	meta.Index = state.Index()
	return write(w, meta, func(w io.Writer) error { return fsm.WriteState(w, state) })
}

// countingHash is a SHA-256 that counts what it is given.
type countingHash struct {
	h hash.Hash
	n int64
}

func (c *countingHash) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return c.h.Write(p)
}

func write(w io.Writer, meta Meta, stream func(io.Writer) error) error {
	ch := &countingHash{h: sha256.New()}
	if err := stream(ch); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	sum := ch.h.Sum(nil)
	meta.Format, meta.Version = Format, Version
	meta.StateSize, meta.StateSHA256 = ch.n, hex.EncodeToString(sum)
	mj, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return fmt.Errorf("snapshot meta: %w", err)
	}
	mj = append(mj, '\n')
	msum := sha256.Sum256(mj)
	sums := fmt.Sprintf("%x  %s\n%x  %s\n", msum, metaName, sum, stateName)

	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	member := func(name string, size int64, body func(io.Writer) error) error {
		hdr := &tar.Header{Name: name, Mode: 0o600, Size: size, ModTime: meta.Created, Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("snapshot archive %s: %w", name, err)
		}
		if err := body(tw); err != nil {
			return fmt.Errorf("snapshot archive %s: %w", name, err)
		}
		return nil
	}
	bytesOf := func(b []byte) func(io.Writer) error {
		return func(w io.Writer) error { _, err := w.Write(b); return err }
	}
	if err := member(metaName, int64(len(mj)), bytesOf(mj)); err != nil {
		return err
	}
	// tar refuses a member longer than its header said (ErrWriteTooLong)
	// and Close a shorter one: a second pass that differed fails here.
	if err := member(stateName, ch.n, stream); err != nil {
		return err
	}
	if err := member(sumsName, int64(len(sums)), bytesOf([]byte(sums))); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("snapshot archive: %w", err)
	}
	if err := gz.Close(); err != nil {
		return fmt.Errorf("snapshot archive: %w", err)
	}
	return nil
}

// invalid wraps api.ErrInvalid: every refusal of Read.
func invalid(format string, args ...interface{}) error {
	return fmt.Errorf("%w: snapshot archive: %s", api.ErrInvalid, fmt.Sprintf(format, args...))
}

// Read reads and checks an archive: it must be whole (every member, the
// gzip trailer), a plugreg archive of a version this binary reads, and
// its checksums must match. It returns the meta and state.bin's bytes,
// which are not decoded (Decode does).
func Read(r io.Reader) (*Meta, []byte, error) {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return nil, nil, invalid("not a plugreg snapshot (not gzip: %v)", err)
	}
	tr := tar.NewReader(gz)
	files := map[string][]byte{}
	for _, want := range []string{metaName, stateName, sumsName} {
		hdr, err := tr.Next()
		if err != nil {
			if len(files) == 0 && !errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, nil, invalid("not a plugreg snapshot (no %s: %v)", want, err)
			}
			return nil, nil, invalid("truncated: %s missing (%v)", want, err)
		}
		if hdr.Name != want {
			return nil, nil, invalid("not a plugreg snapshot: member %q where %s belongs", truncate(hdr.Name), want)
		}
		limit := int64(maxMeta)
		if want == stateName {
			limit = MaxSize
		}
		if hdr.Size < 0 || hdr.Size > limit {
			return nil, nil, invalid("%s has %d bytes, more than %d", want, hdr.Size, limit)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, nil, invalid("truncated in %s: %v", want, err)
		}
		files[want] = b
		if want == metaName {
			// Say "foreign" or "newer" before anything else about a
			// file that is not ours to judge.
			if _, err := parseMeta(b); err != nil {
				return nil, nil, err
			}
		}
	}
	if _, err := tr.Next(); err != io.EOF {
		return nil, nil, invalid("unexpected data after %s", sumsName)
	}
	// The gzip trailer (CRC and length) is checked at its EOF: a file cut
	// inside it is truncated even with every member read.
	if _, err := io.Copy(io.Discard, gz); err != nil {
		return nil, nil, invalid("truncated: %v", err)
	}
	meta, _ := parseMeta(files[metaName])
	if err := checkSums(files); err != nil {
		return nil, nil, err
	}
	st := files[stateName]
	if int64(len(st)) != meta.StateSize {
		return nil, nil, invalid("state.bin has %d bytes, meta.json says %d", len(st), meta.StateSize)
	}
	if sum := sha256.Sum256(st); hex.EncodeToString(sum[:]) != meta.StateSHA256 {
		return nil, nil, invalid("corrupted: state.bin's SHA-256 is not meta.json's")
	}
	return meta, st, nil
}

func parseMeta(b []byte) (*Meta, error) {
	var m Meta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, invalid("not a plugreg snapshot (meta.json: %v)", err)
	}
	if m.Format != Format {
		return nil, invalid("not a plugreg snapshot (format %q)", truncate(m.Format))
	}
	if m.Version > Version {
		return nil, invalid("written by a newer plugreg (archive version %d; this binary reads up to %d)", m.Version, Version)
	}
	if m.Version < 1 {
		return nil, invalid("archive version %d", m.Version)
	}
	return &m, nil
}

// checkSums checks SHA256SUMS against the members.
func checkSums(files map[string][]byte) error {
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(string(files[sumsName])), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		if !ok {
			return invalid("corrupted: SHA256SUMS line %q", truncate(line))
		}
		b, known := files[name]
		if !known || name == sumsName {
			return invalid("corrupted: SHA256SUMS names %q", truncate(name))
		}
		if got := sha256.Sum256(b); hex.EncodeToString(got[:]) != sum {
			return invalid("corrupted: %s does not match its SHA-256", name)
		}
		seen++
	}
	if seen != 2 {
		return invalid("corrupted: SHA256SUMS has %d entries, want 2", seen)
	}
	return nil
}

// Decode reads an archive and decodes its state, checking every invariant
// the FSM keeps (fsm.ReadState); the state's index must be the meta's.
func Decode(r io.Reader) (*Meta, *fsm.State, error) {
	meta, st, err := Read(r)
	if err != nil {
		return nil, nil, err
	}
	state, err := fsm.ReadState(bytes.NewReader(st))
	if err != nil {
		return nil, nil, invalid("state: %v", err)
	}
	if state.Index() != meta.Index {
		return nil, nil, invalid("state at index %d, meta.json says %d", state.Index(), meta.Index)
	}
	return meta, state, nil
}

// Summary is what `plugreg snapshot inspect` shows of an archive.
type Summary struct {
	Meta
	Types     map[string]TypeCount
	Instances int
	ACLTokens int
}

// TypeCount counts one type's names and instances.
type TypeCount struct{ Names, Instances int }

// Summarize counts state's contents per type.
func Summarize(meta *Meta, state *fsm.State) Summary {
	s := Summary{Meta: *meta, Types: map[string]TypeCount{}, Instances: state.Len(), ACLTokens: len(state.ACLTokens())}
	state.Walk(func(ptype, _ string, list []*api.PluginInfo) bool {
		c := s.Types[ptype]
		c.Names++
		c.Instances += len(list)
		s.Types[ptype] = c
		return true
	})
	return s
}

// truncate keeps a foreign file's strings short in an error.
func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
