package cluster

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// A read index names an entry the FSM sees, so that a follower's wait for
// it ends with that entry's apply: raft's barriers and no-ops (a new
// term's commit index) never reach the FSM, and a wait for one of them
// would end only when the wait found out by asking raft again. And a wait
// for such an index, as a leader of an older release answers, still ends.
func TestReadIndexIsAnEntryTheFSMSees(t *testing.T) {
	s := soloServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.raft.Barrier(10 * time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	barrier := s.raft.LastIndex()
	if applied := s.fsm.State().Index(); applied >= barrier {
		t.Fatalf("the FSM is at %d, the barrier at %d: nothing to test", applied, barrier)
	}
	idx, err := s.ReadIndex(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var l raft.Log
	if err := s.logs.GetLog(idx, &l); err != nil {
		t.Fatalf("the read index %d: %v", idx, err)
	}
	if l.Type != raft.LogCommand && l.Type != raft.LogConfiguration {
		t.Fatalf("the read index %d is a %v entry, which the FSM never sees (the barrier is at %d)", idx, l.Type, barrier)
	}
	if err := s.waitApplied(ctx, barrier); err != nil {
		t.Fatalf("waiting for the barrier's index: %v", err)
	}
}

// Every write reaches raft through commit (propose.go): the API's, the
// leader's own and a restore's alike, encoded and validated once, and
// waited for once. A call of raft's Apply anywhere else is a write that
// skips them.
func TestEveryWriteIsCommitted(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || name == "propose.go" {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if inner, ok := sel.X.(*ast.SelectorExpr); ok && inner.Sel.Name == "raft" {
				switch sel.Sel.Name {
				case "Apply", "ApplyLog":
					t.Errorf("%s: raft.%s outside propose.go: a write that is not committed", fset.Position(sel.Pos()), sel.Sel.Name)
				}
			}
			switch sel.Sel.Name {
			case "proposeCmd", "applyLocal":
				t.Errorf("%s: %s outside propose.go: a write that is not committed", fset.Position(sel.Pos()), sel.Sel.Name)
			}
			return true
		})
	}
}
