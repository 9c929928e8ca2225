// Copyright (c) HashiCorp, Inc.
// SPDX-License-Identifier: MPL-2.0

package raft

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// gatedLogStore is a log store whose writes a test can hold (StoreLogs
// waits until released) or fail once.
type gatedLogStore struct {
	LogStore

	mu      sync.Mutex
	gate    chan struct{} // non-nil: StoreLogs waits for it to close
	failure error         // the next StoreLogs fails with it, once
	entered chan uint64   // the first index of each held StoreLogs
}

func newGatedLogStore(s LogStore) *gatedLogStore {
	return &gatedLogStore{LogStore: s, entered: make(chan uint64, 1024)}
}

func (s *gatedLogStore) hold() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gate == nil {
		s.gate = make(chan struct{})
	}
}

func (s *gatedLogStore) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gate != nil {
		close(s.gate)
		s.gate = nil
	}
}

func (s *gatedLogStore) failNext(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failure = err
}

func (s *gatedLogStore) StoreLog(l *Log) error { return s.StoreLogs([]*Log{l}) }

func (s *gatedLogStore) StoreLogs(logs []*Log) error {
	s.mu.Lock()
	gate := s.gate
	failure := s.failure
	s.failure = nil
	s.mu.Unlock()
	if gate != nil {
		s.entered <- logs[0].Index
		<-gate
	}
	if failure != nil {
		return failure
	}
	return s.LogStore.StoreLogs(logs)
}

// A cluster whose log stores are gated, behind a LogCache when cached (as
// plugreg has them): the cache takes an entry only once the store below
// has written it, so it does not help replication read an entry whose
// write is held.
func makeGatedCluster(t *testing.T, peers int, cached bool) (*cluster, []*gatedLogStore) {
	gated := make([]*gatedLogStore, peers)
	c := MakeClusterCustom(t, &MakeClusterOpts{
		Peers:     peers,
		Bootstrap: true,
		Conf:      inmemConfig(t),
		WrapLogStore: func(i int, logs LogStore) LogStore {
			gated[i] = newGatedLogStore(logs)
			if !cached {
				return gated[i]
			}
			cache, err := NewLogCache(512, gated[i])
			if err != nil {
				t.Fatal(err)
			}
			return cache
		},
	})
	return c, gated
}

// waitEntered waits for a held write to reach the store.
func waitEntered(t *testing.T, s *gatedLogStore) uint64 {
	t.Helper()
	select {
	case idx := <-s.entered:
		return idx
	case <-time.After(5 * time.Second):
		t.Fatal("timed out waiting for the leader's write to reach its log store")
		return 0
	}
}

// pending returns a channel that gets f's error once it is resolved.
func pending(f Future) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f.Error() }()
	return ch
}

func fsmHas(fsm FSM, data string) bool {
	for _, l := range getMockFSM(fsm).Logs() {
		if string(l) == data {
			return true
		}
	}
	return false
}

// The leader hands a new entry to replication at once and writes it to
// its own log at the same time (the Raft thesis, §10.2.1): while its own
// write is held, the followers store the entry, and with three servers
// they are a quorum and commit it. The leader acknowledges it only once its
// own write is done. Written serially (v1.7.3, or the switch off), the
// entry reaches no follower while the leader's write is held.
func TestRaft_LeaderWritesLogInParallel(t *testing.T) {
	for _, cached := range []bool{false, true} {
		t.Run(fmt.Sprintf("cached=%v", cached), func(t *testing.T) {
			c, gated := makeGatedCluster(t, 3, cached)
			defer c.Close()

			leader := c.Leader()
			applyEach(t, leader, "before", 5)
			c.WaitForReplication(5)

			ls := gated[c.IndexOf(leader)]
			ls.hold()
			defer ls.release()
			idx := leader.getLastIndex() + 1
			done := pending(leader.Apply([]byte("parallel"), 0))
			waitEntered(t, ls)

			waitUntil(t, "the followers to store and apply the entry while the leader's write is held", func() bool {
				for _, f := range c.Followers() {
					var l Log
					if f.logs.GetLog(idx, &l) != nil || !fsmHas(c.fsms[c.IndexOf(f)], "parallel") {
						return false
					}
				}
				return true
			})
			if ci := leader.getCommitIndex(); ci < idx {
				t.Fatalf("the leader's commit index is %d, want %d: the followers are a quorum", ci, idx)
			}
			select {
			case err := <-done:
				t.Fatalf("the future resolved (%v) while the leader's write was held", err)
			case <-time.After(50 * time.Millisecond):
			}
			if fsmHas(c.fsms[c.IndexOf(leader)], "parallel") {
				t.Fatal("the leader applied the entry before its own write ended")
			}

			ls.release()
			if err := <-done; err != nil {
				t.Fatalf("apply: %v", err)
			}
			c.EnsureSame(t)
		})
	}
}

// A leader alone is its own quorum: it commits an entry only when its own
// write of it has ended, not when it hands the entry to its writer.
func TestRaft_LeaderAloneCommitsAfterItsWrite(t *testing.T) {
	c, gated := makeGatedCluster(t, 1, false)
	defer c.Close()

	leader := c.Leader()
	applyEach(t, leader, "before", 3)
	ls := gated[0]
	ls.hold()
	defer ls.release()
	idx := leader.getLastIndex() + 1
	done := pending(leader.Apply([]byte("alone"), 0))
	waitEntered(t, ls)

	// Many commit timeouts, heartbeats and lease checks.
	select {
	case err := <-done:
		t.Fatalf("the future resolved (%v) while the write was held", err)
	case <-time.After(300 * time.Millisecond):
	}
	if ci := leader.getCommitIndex(); ci >= idx {
		t.Fatalf("commit index %d reached the held entry %d", ci, idx)
	}
	if fsmHas(c.fsms[0], "alone") {
		t.Fatal("the entry was applied while its write was held")
	}

	ls.release()
	if err := <-done; err != nil {
		t.Fatalf("apply: %v", err)
	}
	if ci := leader.getCommitIndex(); ci < idx {
		t.Fatalf("commit index %d, want at least %d", ci, idx)
	}
	if !fsmHas(c.fsms[0], "alone") {
		t.Fatal("the entry was not applied")
	}
}

// The leader's write fails: as when the leader wrote before replicating,
// the futures of the entries it did not write fail and the leader steps
// down. Nothing is acknowledged that is not committed; the server's last
// log goes back to what it wrote (alone, a last log left past the failed
// entry would have its next term's entries leave a gap in its log), and the
// cluster goes on.
func TestRaft_LeaderLogWriteFails(t *testing.T) {
	for _, peers := range []int{1, 3} {
		t.Run(fmt.Sprintf("peers=%d", peers), func(t *testing.T) {
			c, gated := makeGatedCluster(t, peers, false)
			defer c.Close()

			old := c.Leader()
			applyEach(t, old, "before", 5)
			c.WaitForReplication(5)
			term := old.getCurrentTerm()

			failure := errors.New("disk on fire")
			gated[c.IndexOf(old)].failNext(failure)
			if err := old.Apply([]byte("failed"), 0).Error(); err == nil {
				t.Fatal("an entry whose leader failed to write it was acknowledged")
			} else if !errors.Is(err, failure) && !errors.Is(err, ErrLeadershipLost) {
				t.Fatalf("apply: %v, want the store's error or ErrLeadershipLost", err)
			}

			var leader *Raft
			waitUntil(t, "a leader in a later term", func() bool {
				for _, r := range c.rafts {
					if r.State() == Leader && r.getCurrentTerm() > term {
						leader = r
						return true
					}
				}
				return false
			})
			applyEach(t, leader, "after", 5)
			c.EnsureSame(t)

			// Every server's log is whole from its first index to its last.
			for _, r := range c.rafts {
				first, _ := r.logs.FirstIndex()
				last, _ := r.logs.LastIndex()
				if li := r.getLastIndex(); li != last {
					t.Fatalf("%s: last log %d, the store's last index %d", r.localID, li, last)
				}
				for i := first; i <= last; i++ {
					var l Log
					if err := r.logs.GetLog(i, &l); err != nil {
						t.Fatalf("%s: entry %d of %d-%d: %v", r.localID, i, first, last, err)
					}
				}
			}
			fsm := getMockFSM(c.fsms[0]).Logs()
			for _, want := range []string{"before 4", "after 4"} {
				if !fsmHas(c.fsms[0], want) {
					t.Fatalf("acknowledged %q missing from %q", want, fsm)
				}
			}
		})
	}
}

// A leader that loses its leadership while its own write is held stays
// leader until the write has ended: as a follower it would take the new
// leader's entries, deleting or overwriting its log's tail while the
// write is under way. Then it steps down and converges, whether the
// followers had the entry (it may be committed) or not (it is overwritten).
func TestRaft_LeadershipLostWithLeaderWriteInFlight(t *testing.T) {
	for _, replicated := range []bool{true, false} {
		t.Run(fmt.Sprintf("replicated=%v", replicated), func(t *testing.T) {
			c, gated := makeGatedCluster(t, 3, false)
			defer c.Close()

			old := c.Leader()
			applyEach(t, old, "before", 5)
			c.WaitForReplication(5)

			ls := gated[c.IndexOf(old)]
			ls.hold()
			defer ls.release()
			if !replicated {
				c.Disconnect(old.localAddr)
			}
			idx := old.getLastIndex() + 1
			done := pending(old.Apply([]byte("in flight"), 0))
			waitEntered(t, ls)
			if replicated {
				waitUntil(t, "the followers to store the entry", func() bool {
					for _, f := range c.Followers() {
						var l Log
						if f.logs.GetLog(idx, &l) != nil {
							return false
						}
					}
					return true
				})
				c.Disconnect(old.localAddr)
			}

			var leader *Raft
			waitUntil(t, "a new leader", func() bool {
				for _, r := range c.rafts {
					if r != old && r.State() == Leader {
						leader = r
						return true
					}
				}
				return false
			})
			applyEach(t, leader, "new", 5)

			// The old leader's lease ran out long ago (50 ms): it has tried to
			// step down and waits for its write.
			time.Sleep(200 * time.Millisecond)
			if s := old.State(); s != Leader {
				t.Fatalf("the old leader became %v with its write still under way", s)
			}

			ls.release()
			waitUntil(t, "the old leader to step down", func() bool { return old.State() != Leader })
			c.FullyConnect()
			c.EnsureSame(t)
			err := <-done
			switch {
			case err == nil && !fsmHas(c.fsms[0], "in flight"):
				t.Fatal("acknowledged, and not in the FSMs")
			case err != nil && !replicated && fsmHas(c.fsms[0], "in flight"):
				t.Fatal("an entry nobody else had was committed")
			}
		})
	}
}

// applyEach applies n entries and waits for the last. (Its own helpers, not
// installsnapshot_log_test.go's: this file stands alone on v1.7.3.)
func applyEach(t *testing.T, r *Raft, prefix string, n int) {
	t.Helper()
	var f ApplyFuture
	for i := 0; i < n; i++ {
		f = r.Apply([]byte(fmt.Sprintf("%s %d", prefix, i)), time.Second)
	}
	if err := f.Error(); err != nil {
		t.Fatalf("apply: %v", err)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
