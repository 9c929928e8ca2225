package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"
)

// A usageError is a mistake on the command line: main prints it as one
// line (with the one flag's line of help it concerns, if any) and a
// pointer to -h, and exits 2, as kubectl and etcdctl do, instead of the
// whole usage that buries the line that is wrong.
type usageError struct {
	cmd  string // "list", "acl token create"
	msg  string
	flag *flag.Flag // the flag the mistake concerns, or nil
}

func (e *usageError) Error() string { return e.msg }

// usageErrorf is a usage error of the command fs parses.
func usageErrorf(fs *flag.FlagSet, format string, args ...any) error {
	return &usageError{cmd: fs.Name(), msg: fmt.Sprintf(format, args...)}
}

// print writes the error to w: the mistake, the wrong flag's help line,
// and where the rest is.
func (e *usageError) print(w io.Writer) {
	cmd := strings.TrimSpace("plugreg " + e.cmd)
	fmt.Fprintf(w, "%s: %s\n", cmd, e.msg)
	if e.flag != nil {
		name, usage := flag.UnquoteUsage(e.flag)
		fmt.Fprintf(w, "  -%s %s\t%s\n", e.flag.Name, name, usage)
	}
	fmt.Fprintf(w, "Run '%s -h' for usage.\n", cmd)
}

// usageOf is a flag set's usage in the form every command prints it.
func usageOf(fs *flag.FlagSet, argsUsage, help string) func() {
	return func() {
		fmt.Fprintf(fs.Output(), "%s\n\n%s\n\nFlags:\n", strings.TrimSpace("Usage: plugreg "+fs.Name()+" [flags] "+argsUsage), help)
		fs.PrintDefaults()
	}
}

// errHelp is -h, -help or help: the usage was printed on stdout, as the
// user asked, and the command exits 0.
var errHelp = flag.ErrHelp

// parseFlags parses args with fs. -h prints fs's usage on stdout and
// returns errHelp; a mistake is a *usageError that names the flag, says
// what its value should look like and suggests the flag meant.
func parseFlags(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard) // the flag package's own messages are replaced below
	err := fs.Parse(args)
	fs.SetOutput(os.Stdout)
	if err == nil {
		return nil
	}
	if errors.Is(err, flag.ErrHelp) {
		fs.Usage()
		return errHelp
	}
	return explainFlagError(fs, err)
}

var (
	undefinedFlag = regexp.MustCompile(`^flag provided but not defined: -(.+)$`)
	badValue      = regexp.MustCompile(`^invalid (?:boolean )?value "(.*)" for (?:flag )?-([^:]+): (.*)$`)
	needsArgument = regexp.MustCompile(`^flag needs an argument: -(.+)$`)
)

// explainFlagError turns the flag package's error into a usageError: the
// standard library says "parse error" for "-ttl 5", not that a duration
// needs a unit.
func explainFlagError(fs *flag.FlagSet, err error) error {
	ue := &usageError{cmd: fs.Name(), msg: err.Error()}
	switch m := err.Error(); {
	case undefinedFlag.MatchString(m):
		name := undefinedFlag.FindStringSubmatch(m)[1]
		ue.msg = "unknown flag -" + name
		if s := suggest(name, flagNames(fs)); s != "" {
			ue.msg += fmt.Sprintf(" (did you mean -%s?)", s)
			ue.flag = fs.Lookup(s)
		}
	case badValue.MatchString(m):
		sm := badValue.FindStringSubmatch(m)
		ue.flag = fs.Lookup(sm[2])
		ue.msg = fmt.Sprintf("-%s %q: %s", sm[2], sm[1], valueHint(ue.flag, sm[3]))
	case needsArgument.MatchString(m):
		name := needsArgument.FindStringSubmatch(m)[1]
		ue.flag = fs.Lookup(name)
		ue.msg = fmt.Sprintf("-%s needs a value", name)
	}
	return ue
}

// valueHint says what a flag's value should look like, in place of the
// flag package's "parse error".
func valueHint(f *flag.Flag, reason string) string {
	if f == nil || (reason != "parse error" && !strings.HasPrefix(reason, "strconv.")) {
		return reason
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return reason
	}
	switch g.Get().(type) {
	case time.Duration:
		return "want a duration with a unit, such as 30s, 5m or 1h30m"
	case bool:
		return "want true or false"
	case int, int64:
		return "want a whole number"
	case uint, uint64:
		return "want a whole number, 0 or more"
	case float64:
		return "want a number"
	}
	return reason
}

func flagNames(fs *flag.FlagSet) []string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return names
}

// suggest is the candidate closest to word, if it is close enough to be a
// typo of it (kubectl and git suggest within an edit distance of about a
// third of the word), or one that starts with it ("mem" for "members").
func suggest(word string, candidates []string) string {
	best, bestDist := "", 0
	for _, c := range candidates {
		d := editDistance(word, c)
		if len(word) >= 2 && strings.HasPrefix(c, word) {
			d = 1
		}
		if best == "" || d < bestDist || (d == bestDist && c < best) {
			best, bestDist = c, d
		}
	}
	if best == "" || bestDist > max(1, (len(word)+1)/3) {
		return ""
	}
	return best
}

// editDistance is the optimal string alignment distance: insertions,
// deletions, substitutions and transpositions of neighbours ("lsit").
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// hoistGlobalFlags splits the client flags written before the command
// ("plugreg -addr X list csi", as consul's and kubectl's global flags may
// stand) from the rest of the line. They are handed to the command's own
// flag set, which defines them all.
func hoistGlobalFlags(args []string) (globals, rest []string, err error) {
	fs := newClientFlags("", "", "").fs
	for len(args) > 0 && strings.HasPrefix(args[0], "-") && args[0] != "-" && args[0] != "--" {
		name, _, hasValue := strings.Cut(strings.TrimLeft(args[0], "-"), "=")
		if name == "h" || name == "help" {
			break // the tree's help
		}
		f := fs.Lookup(name)
		if f == nil {
			msg := fmt.Sprintf("unknown flag %s before the command", args[0])
			if s := suggest(name, flagNames(fs)); s != "" {
				msg += fmt.Sprintf(" (did you mean -%s?)", s)
			}
			return nil, nil, &usageError{cmd: "", msg: msg}
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); hasValue || (ok && b.IsBoolFlag()) {
			globals, args = append(globals, args[0]), args[1:]
			continue
		}
		if len(args) < 2 {
			return nil, nil, &usageError{msg: fmt.Sprintf("-%s needs a value", name), flag: f}
		}
		globals, args = append(globals, args[0], args[1]), args[2:]
	}
	return globals, args, nil
}
