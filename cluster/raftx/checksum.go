package raftx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// ChecksumStore is a raft.LogStore that keeps a CRC-32C of each entry
// beside it and checks it on every read, so that a byte changed on disk
// in any entry is an error, never an entry. Neither store checks what it
// reads back: raft-wal checks a CRC only on the tail's last commit at
// open, and bbolt checksums only its meta pages; a flipped byte in a
// committed entry reached the FSM, and replicas diverged without a word.
//
// The checksum travels in the entry's Extensions, which both stores
// persist: on disk Extensions is checksumMagic, the CRC, then the entry's
// own Extensions; a read checks the CRC and hands raft the entry as it was
// given (the leader's entries are replicated as raft holds them, without
// this node's checksum). Entries written before this store wrapped the
// log (an upgrade) carry none; the stable store records the first index
// written with one, and an entry at or past it without one is refused
// too, so that damage to the marker itself is found.
type ChecksumStore struct {
	raft.LogStore
	// from is the first index whose entry must carry a checksum.
	from uint64
}

// checksumFromKey is the stable store's key for ChecksumStore.from.
var checksumFromKey = []byte("plugreg_checksummed_from")

// checksumMagic starts the Extensions of an entry with a checksum.
var checksumMagic = [4]byte{'p', 'r', 'c', '1'}

const checksumHeader = len(checksumMagic) + 4

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CorruptEntryError is a log entry whose bytes on disk are not those
// written: the store is damaged.
type CorruptEntryError struct {
	Index  uint64
	Reason string
}

func (e *CorruptEntryError) Error() string {
	return fmt.Sprintf("log entry %d is damaged: %s", e.Index, e.Reason)
}

// WithChecksums wraps logs. stable records, once, the first index written
// with a checksum (the next one for a log written by an older release).
func WithChecksums(logs raft.LogStore, stable raft.StableStore) (*ChecksumStore, error) {
	from, err := StableUint64(stable, checksumFromKey)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", checksumFromKey, err)
	}
	if from == 0 {
		last, err := logs.LastIndex()
		if err != nil {
			return nil, fmt.Errorf("last index: %w", err)
		}
		from = last + 1
		if err := stable.SetUint64(checksumFromKey, from); err != nil {
			return nil, fmt.Errorf("record %s: %w", checksumFromKey, err)
		}
	}
	return &ChecksumStore{LogStore: logs, from: from}, nil
}

// checksum is the CRC-32C of what raft reads back of an entry: its index,
// term, type, data and extensions (not AppendedAt, a metric only).
func checksum(l *raft.Log, ext []byte) uint32 {
	var head [17]byte
	binary.BigEndian.PutUint64(head[0:], l.Index)
	binary.BigEndian.PutUint64(head[8:], l.Term)
	head[16] = byte(l.Type)
	c := crc32.Update(0, castagnoli, head[:])
	c = crc32.Update(c, castagnoli, l.Data)
	return crc32.Update(c, castagnoli, ext)
}

// withHeader is payload behind magic and sum: what is stored.
func withHeader(magic [4]byte, sum uint32, payload []byte) []byte {
	b := make([]byte, checksumHeader, checksumHeader+len(payload))
	copy(b, magic[:])
	binary.BigEndian.PutUint32(b[len(magic):], sum)
	return append(b, payload...)
}

// splitHeader undoes withHeader; ok is false for bytes without magic (an
// older release's, or a damaged header).
func splitHeader(magic [4]byte, b []byte) (sum uint32, payload []byte, ok bool) {
	if len(b) < checksumHeader || [4]byte(b[:4]) != magic {
		return 0, nil, false
	}
	return binary.BigEndian.Uint32(b[len(magic):]), b[checksumHeader:], true
}

// sealed is a copy of l as it is stored: its Extensions behind the
// checksum. l itself is raft's, and stays as it is.
func sealed(l *raft.Log) *raft.Log {
	c := *l
	c.Extensions = withHeader(checksumMagic, checksum(l, l.Extensions), l.Extensions)
	return &c
}

// ReadChecksums wraps logs to read them only (an offline inspection): it
// records nothing, and a log never wrapped needs no checksum.
func ReadChecksums(logs raft.LogStore, stable raft.StableStore) (*ChecksumStore, error) {
	from, err := StableUint64(stable, checksumFromKey)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", checksumFromKey, err)
	}
	if from == 0 {
		from = math.MaxUint64
	}
	return &ChecksumStore{LogStore: logs, from: from}, nil
}

// StableUint64 reads a key of a stable store; unset is 0 (raft-wal
// answers 0, raft-boltdb ErrKeyNotFound).
func StableUint64(s raft.StableStore, key []byte) (uint64, error) {
	v, err := s.GetUint64(key)
	if errors.Is(err, raftboltdb.ErrKeyNotFound) {
		return 0, nil
	}
	return v, err
}

// StableValue reads a key of a stable store; unset is nil (raft-wal
// answers nil, raft-boltdb ErrKeyNotFound).
func StableValue(s raft.StableStore, key []byte) ([]byte, error) {
	v, err := s.Get(key)
	if errors.Is(err, raftboltdb.ErrKeyNotFound) {
		return nil, nil
	}
	return v, err
}

func (s *ChecksumStore) GetLog(index uint64, l *raft.Log) error {
	if err := s.LogStore.GetLog(index, l); err != nil {
		return err
	}
	if l.Index != index {
		return &CorruptEntryError{Index: index, Reason: fmt.Sprintf("the store returned entry %d", l.Index)}
	}
	want, ext, ok := splitHeader(checksumMagic, l.Extensions)
	if !ok {
		if index >= s.from {
			return &CorruptEntryError{Index: index, Reason: "its checksum is missing"}
		}
		return nil // written before checksums
	}
	l.Extensions = ext
	if len(l.Extensions) == 0 {
		l.Extensions = nil
	}
	if got := checksum(l, l.Extensions); got != want {
		return &CorruptEntryError{Index: index, Reason: fmt.Sprintf("checksum %08x, written %08x", got, want)}
	}
	return nil
}

func (s *ChecksumStore) StoreLog(l *raft.Log) error {
	return s.LogStore.StoreLog(sealed(l))
}

func (s *ChecksumStore) StoreLogs(ls []*raft.Log) error {
	out := make([]*raft.Log, len(ls))
	for i, l := range ls {
		out[i] = sealed(l)
	}
	return s.LogStore.StoreLogs(out)
}

// IsMonotonic is the wrapped store's: raft treats a monotonic store's log
// differently after a snapshot install.
func (s *ChecksumStore) IsMonotonic() bool {
	m, ok := s.LogStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

// ChecksumStableStore is a raft.StableStore whose values carry a CRC-32C
// of key and value, checked on every read: raft's current term and vote
// live here, and a changed byte in the last vote's term could let a
// server vote twice in a term. Neither store checks its values (bbolt
// checksums only its meta pages). A value without one was written by an
// older release and is read unchecked; its first write adds one.
type ChecksumStableStore struct {
	raft.StableStore
}

// stableMagic starts a value with a checksum.
var stableMagic = [4]byte{'p', 'r', 's', '1'}

// CorruptValueError is a stable store value whose bytes are not those
// written.
type CorruptValueError struct {
	Key string
}

func (e *CorruptValueError) Error() string {
	return fmt.Sprintf("the stable store's value of %q is damaged: its checksum does not match", e.Key)
}

func valueChecksum(k, v []byte) uint32 {
	return crc32.Update(crc32.Checksum(k, castagnoli), castagnoli, v)
}

func (s ChecksumStableStore) Set(k, v []byte) error {
	return s.StableStore.Set(k, withHeader(stableMagic, valueChecksum(k, v), v))
}

// Get returns k's value (nil when unset, as the wrapped store does).
func (s ChecksumStableStore) Get(k []byte) ([]byte, error) {
	b, err := s.StableStore.Get(k)
	if err != nil {
		return nil, err
	}
	v, _, err := checkValue(k, b)
	return v, err
}

// checkValue returns the value in stored bytes b of key k, and whether it
// carried a checksum (false: unset, or written before checksums).
func checkValue(k, b []byte) (v []byte, checked bool, err error) {
	sum, v, ok := splitHeader(stableMagic, b)
	if !ok {
		return b, false, nil
	}
	if sum != valueChecksum(k, v) {
		return nil, true, &CorruptValueError{Key: string(k)}
	}
	return v, true, nil
}

func (s ChecksumStableStore) SetUint64(k []byte, v uint64) error {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return s.Set(k, b[:])
}

// GetUint64 reads a value this store wrote, or one the wrapped store wrote
// in its own encoding before checksums (raft-wal little-endian, boltdb
// big-endian), which is 8 bytes: other bytes without a checksum are a
// damaged header, which boltdb would read as a number.
func (s ChecksumStableStore) GetUint64(k []byte) (uint64, error) {
	raw, err := s.StableStore.Get(k)
	if err != nil || raw == nil {
		return s.StableStore.GetUint64(k) // unset: the store's own answer
	}
	v, checked, err := checkValue(k, raw)
	switch {
	case err != nil:
		return 0, err
	case len(v) != 8:
		return 0, &CorruptValueError{Key: string(k)}
	case !checked:
		return s.StableStore.GetUint64(k)
	}
	return binary.BigEndian.Uint64(v), nil
}
