// Package filter owns the ?filter= expressions of the HTTP API: it
// compiles one (hashicorp/go-bexpr, the syntax Consul and Nomad use) and
// matches plugin instances and events against it.
//
// An expression selects the fields of api.PluginInfo by their Go names
// (Type, Name, Options.foo, ConnectionInfo.Address, CreateIndex, ...):
// bexpr reads them by reflection, so a field added to PluginInfo is
// filterable without a change here.
//
// It is server-side only: the Go client and the api package pass the
// expression as a string and never link bexpr.
package filter

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/hashicorp/go-bexpr"
	"github.com/hashicorp/go-bexpr/grammar"
	"github.com/plugreg/plugreg/api"
)

// Limits on one expression. Anyone who may read may send one, so its
// size and its work per instance are bounded before it runs.
const (
	// MaxBytes bounds an expression's text.
	MaxBytes = 4096
	// MaxCost bounds the match tests one instance costs: each test
	// counts 1, and a collection expression (any/all over a map) counts
	// its body times api.MaxOptions, the most entries a map of
	// PluginInfo holds. Nested collections multiply, so this is what
	// keeps `any Options as a { any Options as b { ... } }` from taking
	// 64^depth tests per instance.
	MaxCost = 256
	// maxParseSteps bounds the parser's work. bexpr's parser backtracks
	// exponentially in nested parentheses (ten levels took 1.5 s, and
	// 200 ran for minutes under its default bound of 2,000,000 steps);
	// 200,000 steps is a few milliseconds, and parses any flat expression
	// of MaxBytes.
	maxParseSteps = 200_000
)

// Filter is a compiled expression, with the budget of the request or
// stream it serves (budget.go). A nil *Filter matches everything.
// Not safe for concurrent use: bexpr compiles a `matches` regular
// expression on its first evaluation into the expression's tree (once
// for the Filter, never again), and the budget is the request's, so
// each request compiles its own.
type Filter struct {
	eval *bexpr.Evaluator
	// tree is this package's parse of the expression, and weight the
	// weight of each of its tests: they price an evaluation before it
	// runs (bexpr keeps its own tree).
	tree   grammar.Expression
	weight map[*grammar.MatchExpression]int64
	budget budget
	// evaluations counts the instances evaluated (the tests read it).
	evaluations int
}

var pluginType = reflect.TypeFor[api.PluginInfo]()

// Compile compiles expr; "" is no filter (nil, nil). A bad expression's
// error wraps api.ErrInvalid (api.ErrTooLarge when over MaxBytes) and
// starts with "filter: "; a syntax error carries its position as
// line:column (offset).
func Compile(expr string) (*Filter, error) {
	if strings.TrimSpace(expr) == "" {
		return nil, nil
	}
	if len(expr) > MaxBytes {
		return nil, fmt.Errorf("%w: filter is %d bytes, at most %d", api.ErrTooLarge, len(expr), MaxBytes)
	}
	// Parsed here as well as by CreateEvaluator: the tree is checked
	// before anything is evaluated, and the Evaluator keeps its own.
	tree, err := parse(expr)
	if err != nil {
		return nil, fmt.Errorf("%w: filter: %v", api.ErrInvalid, err)
	}
	c := checker{weight: map[*grammar.MatchExpression]int64{}}
	cost, err := c.check(tree, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: filter: %v", api.ErrInvalid, err)
	}
	if cost > MaxCost {
		return nil, fmt.Errorf("%w: filter costs %d tests per instance, at most %d (fewer tests, or fewer nested any/all)", api.ErrInvalid, cost, MaxCost)
	}
	eval, err := bexpr.CreateEvaluator(expr, bexpr.WithMaxExpressions(maxParseSteps))
	if err != nil {
		return nil, fmt.Errorf("%w: filter: %v", api.ErrInvalid, err)
	}
	return &Filter{eval: eval, tree: tree, weight: c.weight, budget: budget{left: MaxWork}}, nil
}

// ForStream makes f's budget a stream's (starting at now): MaxWork at
// once, regained at StreamWorkPerSecond, so one event may cost what one
// request may, and a stream cannot keep a core busy.
func (f *Filter) ForStream(now time.Time) {
	if f != nil {
		f.budget = budget{left: MaxWork, stream: true, last: now}
	}
}

// parse parses expr, turning a panic of the parser into an error (the
// parser recovers its own; this is the last line).
func parse(expr string) (tree grammar.Expression, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("cannot parse: %v", r)
		}
	}()
	t, err := grammar.Parse("", []byte(expr), grammar.MaxExpressions(maxParseSteps))
	if err != nil {
		return nil, err
	}
	tree, ok := t.(grammar.Expression)
	if !ok {
		return nil, fmt.Errorf("parser returned %T", t)
	}
	return tree, nil
}

// checker checks a tree and records the weight of each of its tests.
type checker struct {
	weight   map[*grammar.MatchExpression]int64
	patterns int
}

// check walks the tree: every selector names a field of PluginInfo (or a
// name a collection expression bound), every `matches` value is a valid
// regular expression of at most MaxProgram instructions, and there are at
// most MaxPatterns of them; it returns the expression's cost (MaxCost).
func (c *checker) check(e grammar.Expression, bound map[string]bool) (int, error) {
	switch e := e.(type) {
	case *grammar.UnaryExpression:
		return c.check(e.Operand, bound)
	case *grammar.BinaryExpression:
		l, err := c.check(e.Left, bound)
		if err != nil {
			return 0, err
		}
		r, err := c.check(e.Right, bound)
		return l + r, err
	case *grammar.MatchExpression:
		if err := checkSelector(e.Selector, bound); err != nil {
			return 0, err
		}
		c.weight[e] = 1
		if (e.Operator == grammar.MatchMatches || e.Operator == grammar.MatchNotMatches) && e.Value != nil {
			if c.patterns++; c.patterns > MaxPatterns {
				return 0, fmt.Errorf("more than %d matches tests, at most %d", MaxPatterns, MaxPatterns)
			}
			n, err := programSize(e.Value.Raw)
			if err != nil {
				return 0, fmt.Errorf("%s matches: %v", e.Selector, err)
			}
			c.weight[e] = int64(max(n, 1))
		}
		return 1, nil
	case *grammar.CollectionExpression:
		if err := checkSelector(e.Selector, bound); err != nil {
			return 0, err
		}
		inner := map[string]bool{}
		for k := range bound {
			inner[k] = true
		}
		for _, n := range []string{e.NameBinding.Default, e.NameBinding.Index, e.NameBinding.Value} {
			if n != "" {
				inner[n] = true
			}
		}
		n, err := c.check(e.Inner, inner)
		return min(n*api.MaxOptions, MaxCost+1), err // capped: no overflow however deep
	}
	return 0, fmt.Errorf("unknown expression %T", e)
}

// checkSelector reports a selector that names no field of PluginInfo, by
// the Go names bexpr resolves (a map's keys are free: a missing key is
// "not present", which every operator defines).
func checkSelector(sel grammar.Selector, bound map[string]bool) error {
	if len(sel.Path) == 0 || bound[sel.Path[0]] {
		return nil
	}
	t := pluginType
	for i, part := range sel.Path {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch t.Kind() {
		case reflect.Struct:
			f, ok := t.FieldByName(part)
			if !ok || !f.IsExported() {
				return fmt.Errorf("unknown field %q in selector %q (fields: %s)", part, sel, fieldNames(t))
			}
			t = f.Type
		case reflect.Map, reflect.Slice:
			t = t.Elem()
		default:
			return fmt.Errorf("selector %q: %s is a %s and has no field %q", sel, strings.Join(sel.Path[:i], "."), t.Kind(), part)
		}
	}
	return nil
}

func fieldNames(t reflect.Type) string {
	var names []string
	for i := 0; i < t.NumField(); i++ {
		if t.Field(i).IsExported() {
			names = append(names, t.Field(i).Name)
		}
	}
	return strings.Join(names, ", ")
}

// Match reports whether p matches, spending the evaluation's price
// (budget.go) first. An error is the expression's: a value that does not
// convert to the field's type (CreateIndex == "x"), found only when
// evaluated, or ErrBudget, the budget spent.
func (f *Filter) Match(p *api.PluginInfo) (ok bool, err error) {
	return f.match(p, time.Time{}) // a request's budget does not refill
}

func (f *Filter) match(p *api.PluginInfo, now time.Time) (ok bool, err error) {
	if f == nil {
		return true, nil
	}
	if p == nil {
		return false, nil
	}
	d := datum(p)
	if err := f.budget.spend(price(f.tree, f.weight, reflect.ValueOf(d), nil), now); err != nil {
		return false, err
	}
	defer func() {
		// bexpr has panicked on hostile expressions before (0.1.16 and
		// 0.1.17 fixed two); a request must not take the agent down.
		if r := recover(); r != nil {
			ok, err = false, fmt.Errorf("%w: filter: cannot evaluate: %v", api.ErrInvalid, r)
		}
	}()
	f.evaluations++
	ok, err = f.eval.Evaluate(d)
	if err != nil {
		return false, fmt.Errorf("%w: filter: %v", api.ErrInvalid, err)
	}
	return ok, nil
}

// passing is the Health a passing instance shows an expression.
var passing = api.InstanceHealth{Status: api.HealthPassing}

// datum is what an expression sees of p: p itself, except that a passing
// instance, whose Health is nil, shows Health{Status: "passing"}. Without
// it a selector into Health fails to evaluate on every passing instance
// (bexpr cannot step through a nil pointer), and `Health.Status ==
// "passing"` could select nothing.
func datum(p *api.PluginInfo) *api.PluginInfo {
	if p.Health != nil {
		return p
	}
	c := *p
	h := passing
	c.Health = &h
	return &c
}

// Plugins returns the first limit instances of in that match (all of
// them when limit is 0), in order (in itself when f is nil). It stops
// when ctx ends (the client left: the rest of a long list is not worth
// evaluating) or the request's budget is spent.
func (f *Filter) Plugins(ctx context.Context, in []*api.PluginInfo, limit int) ([]*api.PluginInfo, error) {
	if f == nil {
		return in, nil
	}
	var out []*api.PluginInfo
	for _, p := range in {
		if limit > 0 && len(out) == limit {
			break
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("filter: stopped after %d of %d instances: %w", len(out), len(in), err)
		}
		ok, err := f.Match(p)
		if err != nil {
			return nil, fmt.Errorf("%w (evaluating %s/%s/%s)", err, p.Type, p.Name, p.AllocID)
		}
		if ok {
			out = append(out, p)
		}
	}
	return out, nil
}

// Event returns what of ev a filtered stream delivers: ev itself when it
// is a change whose Info matches or a heartbeat, a copy holding only the
// matching Plugins for a reset, and false for a change that does not
// match. A change the expression cannot be evaluated against is not
// delivered: the stream has started, there is no answer left to refuse.
// An error is ErrBudget: the stream's budget (ForStream) is spent, and
// the stream must end, since what it delivers next would not be what the
// filter selects.
func (f *Filter) Event(ev *api.Event, now time.Time) (*api.Event, bool, error) {
	if f == nil {
		return ev, true, nil
	}
	switch ev.EventType {
	case api.EventHeartbeat:
		return ev, true, nil
	case api.EventReset:
		out := *ev
		out.Plugins = nil
		for _, p := range ev.Plugins {
			ok, err := f.match(p, now)
			if IsBudget(err) {
				return nil, false, err
			}
			if ok {
				out.Plugins = append(out.Plugins, p)
			}
		}
		return &out, true, nil
	}
	ok, err := f.match(ev.Info, now)
	if IsBudget(err) {
		return nil, false, err
	}
	return ev, ok, nil
}
