package raftx

import (
	"fmt"

	"github.com/hashicorp/raft"
)

// Await is f.Error(), unless Raft stopped without answering f: raftGone
// is closed once Raft has stopped. hashicorp/raft v1.7.3 can drop a
// committed batch at shutdown (runFSM returns while batches wait in its
// channel, and the futures of Apply and Barrier carry no shutdown channel;
// hashicorp/raft issue 498, open; PR 504 closed unmerged; v1.8.0
// unchanged), so f.Error() alone can block forever, and an RPC handler or
// the leader loop blocked there hangs the server's shutdown (the mux and
// the server wait for them). The goroutine that waits on f ends when Raft
// answers it, or with the process.
func Await(f raft.Future, raftGone <-chan struct{}) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-raftGone:
	}
	select {
	case err := <-done:
		return err
	default:
		return fmt.Errorf("%w: raft stopped without answering", raft.ErrRaftShutdown)
	}
}
