package registry

import (
	"context"
	"fmt"
	"sync"

	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/fsm"
)

// Applier proposes an encoded command and returns its result once it has
// been committed and applied by the FSM. In a cluster it is raft (with
// forwarding to the leader); in one process it is a LocalApplier.
type Applier interface {
	Apply(ctx context.Context, cmd []byte) (*fsm.ApplyResult, error)
}

// LocalApplier applies commands straight to an FSM, one at a time, with
// consecutive indexes, as a single-node log would. It is the registry of a
// single process (Nomad's client-local registry), not a replicated one.
type LocalApplier struct {
	mu  sync.Mutex // serialises Apply, as raft's FSM goroutine does
	fsm *fsm.FSM
}

// NewLocalApplier continues f's log after its current index.
func NewLocalApplier(f *fsm.FSM) *LocalApplier { return &LocalApplier{fsm: f} }

func (a *LocalApplier) Apply(ctx context.Context, cmd []byte) (*fsm.ApplyResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("local apply: %w", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	index := a.fsm.State().Index() + 1
	res, _ := a.fsm.Apply(&raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: cmd}).(*fsm.ApplyResult)
	if res == nil {
		return nil, fmt.Errorf("local apply at %d: no result", index)
	}
	return res, nil
}
