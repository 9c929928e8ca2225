package raftx

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// blockingFSM parks Apply until release is closed, as a Raft goroutine
// parked forever would.
type blockingFSM struct {
	entered chan struct{}
	release chan struct{}
}

func (f *blockingFSM) Apply(*raft.Log) interface{} {
	select {
	case f.entered <- struct{}{}:
	default:
	}
	<-f.release
	return nil
}
func (f *blockingFSM) Snapshot() (raft.FSMSnapshot, error) { return nil, errors.New("no snapshots") }
func (f *blockingFSM) Restore(io.ReadCloser) error         { return errors.New("no snapshots") }

// Shutdown is bounded even when a Raft goroutine never returns: it waits
// once, closes the network under Raft, waits again, then gives
// up and says so.
func TestShutdownIsBoundedWhenRaftHangs(t *testing.T) {
	fsm := &blockingFSM{entered: make(chan struct{}, 1), release: make(chan struct{})}
	rc := raft.DefaultConfig()
	rc.LocalID = "solo"
	rc.Logger = hclog.NewNullLogger()
	rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
	store := raft.NewInmemStore()
	addr, trans := raft.NewInmemTransport("")
	r, err := raft.NewRaft(rc, fsm, store, store, raft.NewInmemSnapshotStore(), trans)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		close(fsm.release) // let the parked goroutine end, and Raft with it
		r.Shutdown().Error()
	}()
	if err := r.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{ID: "solo", Address: addr}}}).Error(); err != nil {
		t.Fatal(err)
	}
	for r.State() != raft.Leader {
		time.Sleep(10 * time.Millisecond)
	}
	r.Apply([]byte("x"), time.Second)
	<-fsm.entered // the FSM goroutine is now parked
	closed := false
	stopped, err := Shutdown(r, 100*time.Millisecond, func() { closed = true }, hclog.NewNullLogger())
	if stopped || err != nil || !closed {
		t.Fatalf("Shutdown with a parked goroutine: stopped %v, err %v, connections closed %v; want abandoned after closing them", stopped, err, closed)
	}
}
