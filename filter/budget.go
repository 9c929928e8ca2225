package filter

import (
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/hashicorp/go-bexpr/grammar"
	"github.com/plugreg/plugreg/api"
)

// The work of a filter is counted in steps: a test costs its weight (the
// program size of a `matches` pattern, 1 for any other test) times one
// more than the bytes of the value it reads, for every value it reads.
// Go's regular expressions are linear (RE2): a match costs at most about
// program size times input, so the CPU of an evaluation is bounded by its
// steps, and each factor is bounded: program size by MaxProgram and
// MaxPatterns, the bytes of an instance by api.MaxPluginBytes, the values
// read by MaxCost, and the evaluations by the budget below.
const (
	// MaxWork bounds the steps of one request's filter, and the steps a
	// stream may spend at once. A step of a `matches` test costs from a
	// few nanoseconds to about 70 (measured on a busy machine: 68 for a
	// 305-instruction pattern of Unicode classes, whose NFA keeps
	// hundreds of threads alive), so this is about a second of CPU at
	// worst; a list of 100,000 instances filtered by `Name matches
	// "^ebs-"` (7 instructions over a 20-byte name) takes 15 million.
	MaxWork = 1 << 24
	// StreamWorkPerSecond is what a stream's budget regains each second:
	// a hostile stream burns at most a few percent of a core, and a
	// legitimate one (hundreds of steps an event) never runs short.
	StreamWorkPerSecond = MaxWork / 64
)

// ErrBudget marks a filter that needed more work than its budget. It is
// a refusal (api.ErrInvalid, 400): retrying the same request does the
// same work, so it must not be retried as a 503 would be.
var ErrBudget = fmt.Errorf("%w: filter: work budget exceeded", api.ErrInvalid)

// budget is what a filter may still spend: MaxWork for a request; for a
// stream, a bucket of MaxWork that refills at StreamWorkPerSecond.
type budget struct {
	left   int64
	stream bool
	last   time.Time // the last refill (streams)
}

// spend takes n steps at time now, or refuses them all: a price is paid
// before the evaluation it is for, so an evaluation over budget never
// runs.
func (b *budget) spend(n int64, now time.Time) error {
	if b.stream {
		if add := int64(now.Sub(b.last).Seconds() * StreamWorkPerSecond); add > 0 {
			b.left, b.last = min(b.left+add, MaxWork), now
		}
	}
	if n > b.left {
		if b.stream {
			return fmt.Errorf("%w: this stream's filter needs %d steps and has %d left (it regains %d a second, a step being one byte of a value read by a test times the program size of a `matches` pattern); use shorter patterns or fewer tests", ErrBudget, n, b.left, StreamWorkPerSecond)
		}
		return fmt.Errorf("%w: the filter needs more than %d steps over this list (a step is one byte of a value read by a test times the program size of a `matches` pattern); use shorter patterns or fewer tests, or list less (one type, one name)", ErrBudget, MaxWork)
	}
	b.left -= n
	return nil
}

// IsBudget reports whether err is a filter's budget running out.
func IsBudget(err error) bool { return errors.Is(err, ErrBudget) }

// binding is a name a collection expression bound, and the string it
// stands for (a key or a value of Options).
type binding struct{ name, value string }

// price is an upper bound on the steps evaluating e against p takes:
// every test is counted, as if none short-circuited, against the value
// it reads in p.
func price(e grammar.Expression, weight map[*grammar.MatchExpression]int64, p reflect.Value, scope []binding) int64 {
	switch e := e.(type) {
	case *grammar.UnaryExpression:
		return price(e.Operand, weight, p, scope)
	case *grammar.BinaryExpression:
		return price(e.Left, weight, p, scope) + price(e.Right, weight, p, scope)
	case *grammar.MatchExpression:
		v := lookup(e.Selector.Path, p, scope)
		n := 0
		if v.IsValid() && v.Kind() == reflect.String {
			n = v.Len()
		}
		return weight[e] * int64(1+n)
	case *grammar.CollectionExpression:
		return priceCollection(e, weight, p, scope)
	}
	return 1
}

// priceCollection prices any/all over a map of strings (the only
// collection PluginInfo has) as the sum of its body over the entries,
// with the names bound as bexpr binds them.
func priceCollection(e *grammar.CollectionExpression, weight map[*grammar.MatchExpression]int64, p reflect.Value, scope []binding) int64 {
	m := lookup(e.Selector.Path, p, scope)
	if !m.IsValid() || m.Kind() != reflect.Map || m.Type().Key().Kind() != reflect.String || m.Type().Elem().Kind() != reflect.String {
		return 1 // bexpr refuses to iterate it
	}
	total := int64(1)
	for it := m.MapRange(); it.Next(); {
		k, v := it.Key().String(), it.Value().String()
		inner := append(scope[:len(scope):len(scope)],
			binding{e.NameBinding.Default, k}, binding{e.NameBinding.Index, k}, binding{e.NameBinding.Value, v})
		total += price(e.Inner, weight, p, inner)
	}
	return total
}

// lookup resolves a selector in p as bexpr does (Go field names, map
// keys), a bound name first; the zero Value when there is nothing there.
func lookup(path []string, p reflect.Value, scope []binding) reflect.Value {
	if len(path) == 0 {
		return reflect.Value{}
	}
	for i := len(scope) - 1; i >= 0; i-- {
		if scope[i].name != "" && scope[i].name == path[0] {
			if len(path) > 1 {
				return reflect.Value{}
			}
			return reflect.ValueOf(scope[i].value)
		}
	}
	v := p
	for _, part := range path {
		for v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return reflect.Value{}
			}
			v = v.Elem()
		}
		switch {
		case v.Kind() == reflect.Struct:
			v = v.FieldByName(part)
		case v.Kind() == reflect.Map && v.Type().Key().Kind() == reflect.String:
			v = v.MapIndex(reflect.ValueOf(part).Convert(v.Type().Key()))
		default:
			return reflect.Value{}
		}
		if !v.IsValid() {
			return v
		}
	}
	return v
}
