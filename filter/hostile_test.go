package filter

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
)

// alternation is (?:aa|ba|...|) of n two-letter words, ordered so that no
// two neighbours share a prefix (the parser would factor them into a
// class): about three instructions a word.
func alternation(n int) string {
	words := make([]string, n)
	for i := range words {
		words[i] = fmt.Sprintf("%c%c", 'a'+i%26, 'a'+(i/26)%26)
	}
	return "(?:" + strings.Join(words, "|") + ")"
}

// The two patterns of the issue. memoryAttack is a 2 KB expression of
// 1.9 million instructions: compiled and run once over a 5 KB value, it
// allocated 937 MB and ran 104 s. cpuAttack is 230 bytes of about
// 200,000 instructions.
var (
	memoryAttack = fmt.Sprintf("Options.x matches %q", alternation(633)+"{1000}")
	cpuAttack    = fmt.Sprintf("Options.x matches %q", alternation(67)+"{1000}")
)

// heavy is a pattern just under MaxProgram that fails at its first byte
// on every value these tests use: it costs almost nothing to run, and is
// priced in full, so a test exercises the budget without burning a core.
const heavy = `^zzz[a-z]{990}[0-9]{990}`

// totalAlloc returns the bytes fn allocates.
func totalAlloc(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func TestHeavyIsJustUnderTheBound(t *testing.T) {
	n, err := programSize(heavy)
	if err != nil || n < MaxProgram-50 || n > MaxProgram {
		t.Fatalf("heavy compiles to %d instructions (%v), want just under %d", n, err, MaxProgram)
	}
}

// Hostile expressions refused at Compile, with an error naming the limit,
// before anything expands: the memory Compile takes is a few MB whatever
// the pattern would have grown to.
func TestHostileFiltersRefusedAtCompile(t *testing.T) {
	nine := strings.TrimSuffix(strings.Repeat(`Name matches "a" or `, 9), " or ")
	many := make([]string, 650)
	for i := range many {
		many[i] = fmt.Sprintf("%c%c%c", 'a'+i%26, 'a'+(i/26)%26, '0'+i%10)
	}
	for _, tc := range []struct{ name, expr, want string }{
		{"the issue's 2 KB pattern", memoryAttack, "at most 2000"},
		{"the issue's 230-byte pattern", cpuAttack, "at most 2000"},
		{"nested repeats", `Name matches "(?:(?:ab){100}){10}"`, "at most 2000"},
		{"nested repeats past Go's own product bound", `Name matches "((a{1000}){1000})"`, "invalid repeat count"},
		{"repeated classes", `Name matches "[a-z]{1000}[0-9]{1000}"`, "at most 2000"},
		{"a huge alternation", fmt.Sprintf("Name matches %q", strings.Join(many, "|")), "at most 2000"},
		{"unbounded repeat of a big alternation", fmt.Sprintf("Name matches %q", alternation(400)+"+"+alternation(400)+"*"), "at most 2000"},
		{"more matches tests than MaxPatterns", nine, "at most 8"},
		{"deep parentheses", strings.Repeat("(", 30) + `Name matches "^n1$"` + strings.Repeat(")", 30), "max number of expressions parsed"},
		{"a pattern in nested collections", `any Options as a { any Options as b { a matches "x" } }`, "at most 256"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.expr) > MaxBytes {
				t.Fatalf("the expression is %d bytes: it tests MaxBytes, not this", len(tc.expr))
			}
			var err error
			alloc := totalAlloc(func() { _, err = Compile(tc.expr) })
			if err == nil {
				t.Fatal("compiled") // not evaluated: before the bound, that took minutes
			}
			if !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v: want an api.ErrInvalid naming %q", err, tc.want)
			}
			if alloc > 16<<20 {
				t.Errorf("refusing it allocated %d MB", alloc>>20)
			}
		})
	}
}

// Hostile expressions that compile are evaluated within the budget: the
// steps spent never pass MaxWork, the evaluations stop where the budget
// ends (an instance over budget is never evaluated), and a request over
// budget fails with ErrBudget, an api.ErrInvalid.
func TestHostileFiltersEvaluateWithinBudget(t *testing.T) {
	value := func(n int) string { return strings.Repeat("v", n) }
	instances := func(count, optBytes, opts int) []*api.PluginInfo {
		ps := make([]*api.PluginInfo, count)
		for i := range ps {
			o := map[string]string{}
			for j := 0; j < opts; j++ {
				o[fmt.Sprintf("k%d", j)] = value(optBytes)
			}
			o["x"] = value(optBytes)
			ps[i] = &api.PluginInfo{Type: "csi", Name: fmt.Sprintf("n%d", i), AllocID: "a", Options: o}
		}
		return ps
	}
	eight := strings.TrimSuffix(strings.Repeat(fmt.Sprintf("Options.x matches %q or ", heavy), 8), " or ")
	for _, tc := range []struct {
		name       string
		expr       string
		in         []*api.PluginInfo
		overBudget bool
		maxEvals   int
	}{
		// 8 x 1,990 instructions x 60 KB: one instance is over MaxWork.
		{"eight big patterns over a long value", eight, instances(10, 60_000, 0), true, 0},
		// About 1,990 x 500 a test: MaxWork pays for 16 instances of 1,000.
		{"one big pattern over many values", fmt.Sprintf("Options.x matches %q", heavy), instances(1000, 500, 0), true, 16},
		// 64 options of 100 bytes each read by a big pattern: one instance.
		{"a big pattern over every option", fmt.Sprintf("any Options as k, v { v matches %q }", heavy), instances(5, 100, 63), true, 1},
		// A cheap test over long values: within budget, all evaluated.
		{"a cheap test over long values", `Options.x == "y"`, instances(1000, 10_000, 0), false, 1000},
		{"nested parentheses", strings.Repeat("(", 3) + `Name matches "^n1$"` + strings.Repeat(")", 3), instances(1000, 100, 0), false, 1000},
		{"a small pattern over a long list", `Name matches "^n[0-9]+$" and Options.x matches "^v+$"`, instances(20_000, 100, 0), false, 20_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Compile(tc.expr)
			if err != nil {
				t.Fatal(err)
			}
			_, err = f.Plugins(context.Background(), tc.in, 0)
			if tc.overBudget != IsBudget(err) || (err != nil && !errors.Is(err, api.ErrInvalid)) {
				t.Fatalf("over budget %v, want %v: %v", IsBudget(err), tc.overBudget, err)
			}
			if spent := MaxWork - f.budget.left; spent > MaxWork || spent < 0 {
				t.Errorf("spent %d steps, budget %d", spent, MaxWork)
			}
			if f.evaluations != tc.maxEvals {
				t.Errorf("%d evaluations, want %d", f.evaluations, tc.maxEvals)
			}
		})
	}
}

// A list stops when its request's context ends: nothing more is
// evaluated.
func TestPluginsStopsWhenTheRequestEnds(t *testing.T) {
	f, err := Compile(`Name matches "^e"`)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := f.Plugins(ctx, plugins(), 0); !errors.Is(err, context.Canceled) || f.evaluations != 0 {
		t.Fatalf("%v after %d evaluations, want context.Canceled after none", err, f.evaluations)
	}
}

// A stream's budget is MaxWork at once, regained at StreamWorkPerSecond:
// events over it end the stream (an error), and a stream that waits gets
// its budget back.
func TestStreamBudgetRefills(t *testing.T) {
	f, err := Compile(fmt.Sprintf("Options.x matches %q", heavy))
	if err != nil {
		t.Fatal(err)
	}
	// An event priced at 45% of MaxWork.
	w, err := programSize(heavy)
	if err != nil {
		t.Fatal(err)
	}
	n := MaxWork * 45 / 100 / w
	ev := &api.Event{Index: 1, EventType: api.EventRegistered, Info: &api.PluginInfo{Name: "a", Options: map[string]string{"x": strings.Repeat("v", n)}}}
	t0 := time.Unix(1000, 0)
	f.ForStream(t0)
	for _, tc := range []struct {
		at      time.Duration
		refused bool
	}{
		{0, false}, {0, false}, {0, true},
		{time.Second, true},       // 1/64 of MaxWork back: not enough
		{30 * time.Second, false}, // 47% of it back
		{30 * time.Second, true},
		{10 * time.Minute, false}, // full again (never more than MaxWork)
		{10 * time.Minute, false},
		{10 * time.Minute, true},
	} {
		_, _, err := f.Event(ev, t0.Add(tc.at))
		if IsBudget(err) != tc.refused {
			t.Fatalf("at %v: %v, want refused %v", tc.at, err, tc.refused)
		}
	}
	if f.evaluations != 5 {
		t.Errorf("%d evaluations, want the 5 paid for", f.evaluations)
	}
}

// Each pattern is compiled once per Filter (bexpr keeps it in the tree):
// an evaluation allocates no more with a pattern of 1,990 instructions
// than with one of 5.
func TestFilterCompilesEachPatternOnce(t *testing.T) {
	p := &api.PluginInfo{Type: "csi", Name: "zzzabc", AllocID: "a"}
	allocs := map[string]float64{}
	for _, pattern := range []string{"^zzz", heavy} {
		f, err := Compile(fmt.Sprintf("Name matches %q", pattern))
		if err != nil {
			t.Fatal(err)
		}
		allocs[pattern] = testing.AllocsPerRun(100, func() { f.Match(p) })
	}
	if allocs[heavy] > allocs["^zzz"]+2 {
		t.Errorf("an evaluation allocates %v times with a big pattern, %v with a small one: compiled per evaluation?", allocs[heavy], allocs["^zzz"])
	}
}
