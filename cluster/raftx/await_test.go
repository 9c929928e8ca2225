package raftx

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// future is a raft.Future answered when answer is closed, or never.
type future struct {
	answer chan struct{}
	err    error
}

func (f *future) Error() error { <-f.answer; return f.err }

// A future raft answers is answered, and one raft dropped at shutdown
// (hashicorp/raft issue 498) ends the wait once raft is gone, as
// ErrRaftShutdown.
func TestAwait(t *testing.T) {
	t.Run("answered", func(t *testing.T) {
		want := errors.New("answer")
		f := &future{answer: make(chan struct{}), err: want}
		close(f.answer)
		if err := Await(f, make(chan struct{})); err != want {
			t.Fatalf("got %v, want %v", err, want)
		}
	})
	t.Run("dropped at shutdown", func(t *testing.T) {
		f := &future{answer: make(chan struct{})} // never answered
		defer close(f.answer)                     // let the waiting goroutine end
		gone := make(chan struct{})
		done := make(chan error, 1)
		go func() { done <- Await(f, gone) }()
		select {
		case err := <-done:
			t.Fatalf("returned %v before raft was gone", err)
		case <-time.After(50 * time.Millisecond):
		}
		close(gone)
		select {
		case err := <-done:
			if !errors.Is(err, raft.ErrRaftShutdown) {
				t.Fatalf("got %v, want %v", err, raft.ErrRaftShutdown)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("still waiting after raft was gone")
		}
	})
}
