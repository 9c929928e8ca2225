package check

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// regState is the porcupine model's state for one plugin type: name ->
// recency list of "alloc=value", newest first. Values are copied on step.
type regState map[string][]string

func (s regState) clone() regState {
	c := make(regState, len(s))
	for k, v := range s {
		c[k] = append([]string(nil), v...)
	}
	return c
}

func (s regState) String() string {
	names := make([]string, 0, len(s))
	for n := range s {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "%s:[%s] ", n, strings.Join(s[n], " "))
	}
	return strings.TrimSpace(b.String())
}

func splitAV(av string) (string, string) {
	a, v, _ := strings.Cut(av, "=")
	return a, v
}

// step applies op to s; ok reports whether op's recorded output is what the
// model produces (any output, for an op of unknown outcome).
func step(s regState, op *Op) (bool, regState) {
	known := op.Outcome == OK
	switch op.F {
	case FRegister:
		ns := s.clone()
		l := ns[op.Name]
		res := "registered"
		var nl []string
		for _, av := range l {
			if a, v := splitAV(av); a == op.Alloc {
				if v == op.Value {
					return !known || op.Result == "unchanged", s
				}
				res = "updated"
				continue
			}
			nl = append(nl, av)
		}
		ns[op.Name] = append([]string{op.Alloc + "=" + op.Value}, nl...)
		return !known || op.Result == res, ns
	case FDeregister:
		for i, av := range s[op.Name] {
			if a, _ := splitAV(av); a == op.Alloc {
				ns := s.clone()
				l := append(append([]string{}, ns[op.Name][:i]...), ns[op.Name][i+1:]...)
				if len(l) == 0 {
					delete(ns, op.Name)
				} else {
					ns[op.Name] = l
				}
				return !known || op.Result == "deregistered", ns
			}
		}
		return !known || op.Result == "absent", s
	case FGet:
		for _, av := range s[op.Name] {
			if a, v := splitAV(av); a == op.Alloc {
				return !known || (op.Found && op.Got == v), s
			}
		}
		return !known || !op.Found, s
	case FList:
		if !known {
			return true, s
		}
		names := make([]string, 0, len(s))
		for n := range s {
			names = append(names, n)
		}
		sort.Strings(names)
		if len(names) != len(op.List) {
			return false, s
		}
		for i, n := range names {
			a, v := splitAV(s[n][0])
			if it := op.List[i]; it.Name != n || it.Alloc != a || it.Value != v {
				return false, s
			}
		}
		return true, s
	}
	return false, s
}

// Model is the porcupine model of one plugin type's registry. Inputs and
// outputs are the same *Op.
var Model = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byType := map[string][]porcupine.Operation{}
		var types []string
		for _, h := range history {
			t := h.Input.(*Op).Type
			if _, ok := byType[t]; !ok {
				types = append(types, t)
			}
			byType[t] = append(byType[t], h)
		}
		sort.Strings(types)
		out := make([][]porcupine.Operation, 0, len(types))
		for _, t := range types {
			out = append(out, byType[t])
		}
		return out
	},
	Init: func() interface{} { return regState{} },
	Step: func(state, input, output interface{}) (bool, interface{}) {
		return step(state.(regState), input.(*Op))
	},
	Equal: func(a, b interface{}) bool { return a.(regState).String() == b.(regState).String() },
	DescribeOperation: func(input, output interface{}) string {
		op := input.(*Op)
		switch op.F {
		case FRegister:
			return fmt.Sprintf("register(%s/%s=%s) -> %s %s", op.Name, op.Alloc, op.Value, op.Outcome, op.Result)
		case FDeregister:
			return fmt.Sprintf("deregister(%s/%s) -> %s %s", op.Name, op.Alloc, op.Outcome, op.Result)
		case FGet:
			return fmt.Sprintf("get(%s/%s) -> %v %q", op.Name, op.Alloc, op.Found, op.Got)
		}
		return fmt.Sprintf("list(%s) -> [%s] @%d", op.Type, renderItems(op.List), op.Index)
	},
	DescribeState: func(state interface{}) string { return state.(regState).String() },
}

// Operations turns a history into porcupine operations: failed ops and
// failed or unknown reads are dropped (they had no effect); writes of
// unknown outcome return at infinity, so they may take effect at any
// point after their invocation, or not at all. Leased instances are left
// to the lease checker (Leases): the leader's expiries, which this model
// does not know, remove them between their holders' operations.
func Operations(ops []Op) []porcupine.Operation {
	var out []porcupine.Operation
	for i := range ops {
		op := &ops[i]
		if op.Outcome == Fail || (!op.IsWrite() && op.Outcome != OK) || op.Stale || op.Type == LeaseType {
			continue
		}
		end := op.End
		if op.Outcome == Unknown {
			end = math.MaxInt64
		}
		out = append(out, porcupine.Operation{ClientId: op.Process, Input: op, Output: op, Call: op.Start, Return: end})
	}
	return out
}

// Linearizable checks the history with porcupine. A timeout is a failure.
// When vis is not nil, it receives porcupine's HTML visualization.
func Linearizable(ops []Op, timeout time.Duration, annotations []porcupine.Annotation, vis io.Writer) []Violation {
	res, info := porcupine.CheckOperationsVerbose(Model, Operations(ops), timeout)
	if vis != nil {
		info.AddAnnotations(annotations)
		porcupine.Visualize(Model, info, vis)
	}
	switch res {
	case porcupine.Ok:
		return nil
	case porcupine.Unknown:
		return []Violation{violation("linearizable", "porcupine did not finish within %v: not proven, so failed", timeout)}
	}
	return []Violation{violation("linearizable", "the history is not linearizable (see linearizability.html)")}
}
