package raftx

import (
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// unreadableAt is a log store whose entry at bad cannot be read, as a
// damaged one is.
type unreadableAt struct {
	*raft.InmemStore
	bad uint64
}

func (s unreadableAt) GetLog(i uint64, l *raft.Log) error {
	if i == s.bad {
		return errors.New("checksum mismatch")
	}
	return s.InmemStore.GetLog(i, l)
}

// CheckLog fails where raft.NewRaft would panic (an entry it cannot read)
// or pass over entries without a word (a log that starts past the newest
// snapshot), and otherwise returns the newest configuration and the log's
// end.
func TestCheckLog(t *testing.T) {
	conf := raft.Configuration{Servers: []raft.Server{{ID: "n1", Address: "10.0.0.1:7300"}}}
	entries := func(from, to uint64) []*raft.Log {
		var l []*raft.Log
		for i := from; i <= to; i++ {
			l = append(l, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte("x")})
		}
		return l
	}
	for _, tc := range []struct {
		name    string
		logs    []*raft.Log
		bad     uint64
		wantErr string
	}{
		{"whole", append(entries(1, 3), &raft.Log{Index: 4, Term: 1, Type: raft.LogConfiguration, Data: raft.EncodeConfiguration(conf)}), 0, ""},
		{"an entry unreadable", entries(1, 5), 3, "entry 3 of 1-5: checksum mismatch"},
		{"a gap before the log", entries(5, 9), 0, "entries 1-4 are missing"},
		{"empty", nil, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := raft.NewInmemStore()
			if err := store.StoreLogs(tc.logs); err != nil {
				t.Fatal(err)
			}
			stored, err := CheckLog(unreadableAt{store, tc.bad}, raft.NewInmemSnapshotStore())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := uint64(len(tc.logs)); stored.Last != want {
				t.Fatalf("last %d, want %d", stored.Last, want)
			}
			if len(tc.logs) > 0 && (len(stored.Conf.Servers) != 1 || stored.Conf.Servers[0].ID != "n1") {
				t.Fatalf("configuration %v, want the log's", stored.Conf)
			}
		})
	}
}

// A panic in raft's start comes back as an error.
func TestNewRaftNoPanic(t *testing.T) {
	r, err := NewRaftNoPanic(func() (*raft.Raft, error) { panic(errors.New("failed to get log")) })
	if r != nil || err == nil || err.Error() != "failed to get log" {
		t.Fatalf("got %v, %v; want the panic as an error", r, err)
	}
}
