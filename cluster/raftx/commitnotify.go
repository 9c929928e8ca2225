package raftx

import (
	"context"
	"sync"

	"github.com/hashicorp/raft"
)

// CommitNotifier tells followers the leader's commit index as soon as the
// leader has applied an entry.
//
// hashicorp/raft sends the commit index only inside AppendEntries that
// replicate entries, and otherwise after a random 1-2x CommitTimeout
// (hashicorp/raft issues 28 and 282): a follower learns that entry N is
// committed only with the next write, or up to 2x CommitTimeout later. A
// write acknowledged through a follower waits for the follower's own apply
// (read-your-writes through any node), and so do its events and its
// linearizable reads; at one client that wait was most of a write's
// latency (10 ms against etcd's 1 ms: etcd's raft broadcasts the commit
// index as soon as it advances).
//
// The notifier sends what raft's own commit-timeout AppendEntries would
// have sent, sooner: an AppendEntries with no entries, PrevLogEntry/
// PrevLogTerm naming the entry, and LeaderCommitIndex the same index. It
// is safe by Raft's own rules: the index is committed (the leader applied
// it), the follower accepts only if its log holds that entry with that
// term (so, by log matching, its whole prefix equals the leader's), and it
// then commits min(index, its last index) = index. It is sent only to a
// follower that has acknowledged holding the entry (so it never trips the
// follower's "previous log" warnings), only while this node leads, in this
// node's term as raft itself last sent it, and never when raft already
// told the follower that commit index. One request in flight per
// follower; later commits coalesce into the next one.
type CommitNotifier struct {
	trans    raft.Transport
	header   raft.RPCHeader // carries this node's ID and address (Addr)
	isLeader func() bool

	ctx context.Context
	wg  sync.WaitGroup

	mu          sync.Mutex
	stopped     bool
	term        uint64 // the newest term raft sent AppendEntries in
	applied     uint64 // last index this node applied, and its term
	appliedTerm uint64
	peers       map[raft.ServerAddress]*commitPeer
}

// commitPeer is what the leader knows about one follower's log, from the
// AppendEntries raft sent it in the current term.
type commitPeer struct {
	id        raft.ServerID
	term      uint64 // the leader's term in the requests below
	acked     uint64 // the follower holds the leader's log up to acked
	ackedTerm uint64 // the term of entry acked
	told      uint64 // the follower has been told this commit index
	wake      chan struct{}
}

func NewCommitNotifier(ctx context.Context, trans raft.Transport, header raft.RPCHeader, isLeader func() bool) *CommitNotifier {
	return &CommitNotifier{
		trans: trans, header: header, isLeader: isLeader, ctx: ctx,
		peers: map[raft.ServerAddress]*commitPeer{},
	}
}

// Wait returns when every follower goroutine has stopped (once ctx ends);
// none starts after it.
func (n *CommitNotifier) Wait() {
	n.mu.Lock()
	n.stopped = true
	n.mu.Unlock()
	n.wg.Wait()
}

// AppliedUpTo records that this node applied up to index (of term): the
// FSM's wrapper calls it after each batch.
func (n *CommitNotifier) AppliedUpTo(index, term uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if index <= n.applied {
		return
	}
	n.applied, n.appliedTerm = index, term
	for _, p := range n.peers {
		if p.told < index {
			wake(p.wake)
		}
	}
}

// observe learns from an AppendEntries exchange raft (or the notifier)
// had with target.
func (n *CommitNotifier) observe(id raft.ServerID, target raft.ServerAddress, req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.term = max(n.term, req.Term)
	if req.Term == 0 || req.PrevLogEntry == 0 && len(req.Entries) == 0 {
		return // a heartbeat: says nothing about the follower's log
	}
	p := n.peers[target]
	if p == nil {
		if n.stopped {
			return
		}
		p = &commitPeer{id: id, wake: make(chan struct{}, 1)}
		n.peers[target] = p
		n.wg.Add(1)
		go n.run(target, p)
	}
	if req.Term < p.term {
		return // from an older term: stale
	}
	if req.Term > p.term {
		// A new term: what the follower held may have been overwritten
		// by another leader since.
		p.id, p.term, p.acked, p.ackedTerm, p.told = id, req.Term, 0, 0, 0
	}
	if !resp.Success || resp.Term != req.Term {
		return
	}
	last, lastTerm := req.PrevLogEntry, req.PrevLogTerm
	if k := len(req.Entries); k > 0 {
		last, lastTerm = req.Entries[k-1].Index, req.Entries[k-1].Term
	}
	if last > p.acked {
		p.acked, p.ackedTerm = last, lastTerm
	}
	// The follower committed min(LeaderCommitIndex, its last index), and
	// its last index is at least last.
	if told := min(req.LeaderCommitIndex, last); told > p.told {
		p.told = told
	}
	if p.told < n.applied {
		wake(p.wake)
	}
}

// run sends the notices to one follower until the notifier stops.
func (n *CommitNotifier) run(target raft.ServerAddress, p *commitPeer) {
	defer n.wg.Done()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-p.wake:
		}
		n.mu.Lock()
		// Tell the follower the highest index it both holds and the
		// leader applied; its term is known for either.
		index, term := n.applied, n.appliedTerm
		if p.acked < index {
			index, term = p.acked, p.ackedTerm
		}
		req := &raft.AppendEntriesRequest{
			RPCHeader:         n.header,
			Term:              p.term,
			PrevLogEntry:      index,
			PrevLogTerm:       term,
			LeaderCommitIndex: index,
		}
		id, send := p.id, index > p.told && p.term == n.term && term != 0
		n.mu.Unlock()
		if !send || !n.isLeader() {
			continue
		}
		var resp raft.AppendEntriesResponse
		if err := n.trans.AppendEntries(id, target, req, &resp); err != nil {
			continue // raft's own replication will tell it
		}
		n.observe(id, target, req, &resp)
	}
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Watch returns trans (without raft's heartbeat fast path: see
// HeartbeatsInOrder) telling n the AppendEntries raft exchanges; what this
// node applied, n learns from AppliedUpTo.
func Watch(n *CommitNotifier, trans *raft.NetworkTransport) raft.Transport {
	return NotifyingTransport{HeartbeatsInOrder: HeartbeatsInOrder{trans}, n: n}
}

// NotifyingTransport is raft's transport, watched: every AppendEntries
// raft exchanges tells the commit notifier what the follower holds and was
// told. Everything else passes through (the embedded transport's Close,
// pre-vote and the rest included).
type NotifyingTransport struct {
	HeartbeatsInOrder
	n *CommitNotifier
}

func (t NotifyingTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	err := t.NetworkTransport.AppendEntries(id, target, req, resp)
	if err == nil {
		t.n.observe(id, target, req, resp)
	}
	return err
}
