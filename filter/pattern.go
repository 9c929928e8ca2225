package filter

import (
	"fmt"
	"regexp/syntax"
)

// MaxProgram bounds one `matches` pattern: the instructions of its
// compiled program, once its repetitions are expanded. Go's regular
// expressions run in time linear in program size times input (RE2), but
// a repetition multiplies the program: `(?:ab|cd|...){1000}` is a 2 KB
// pattern of 1.9 million instructions, which took 937 MB to compile and
// 104 s to run once over a 5 KB value. The patterns a filter needs
// (`^csi-(ebs|nfs)-[0-9]+$` is 20 instructions) are far below it.
const MaxProgram = 2000

// MaxPatterns bounds the `matches` and `not matches` tests of one
// expression: with MaxProgram, it bounds the program size an evaluation
// runs over each value it reads.
const MaxPatterns = 8

// programSize parses pattern as regexp.Compile does and returns the size
// of its program, refusing one over MaxProgram before it is expanded: the
// parser keeps a repetition as one node, Simplify copies it out, so the
// size is estimated on the parsed tree first and Simplify runs only on a
// pattern that the estimate says is small.
func programSize(pattern string) (int, error) {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return 0, err
	}
	if n := expandedSize(re); n > 2*MaxProgram {
		return 0, tooBig(n)
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return 0, err
	}
	if n := len(prog.Inst); n > MaxProgram {
		return 0, tooBig(n)
	}
	return len(prog.Inst), nil
}

func tooBig(n int) error {
	return fmt.Errorf("the pattern compiles to about %d instructions, at most %d (use fewer or smaller repetitions {n} and alternations)", n, MaxProgram)
}

// expandedSize is about the number of instructions re compiles to (a
// little more for repetitions, which is why programSize refuses on it
// only past twice the bound). It is capped so that no nesting overflows.
func expandedSize(re *syntax.Regexp) int {
	const capAt = 1 << 30
	n := 0
	switch re.Op {
	case syntax.OpLiteral:
		n = len(re.Rune)
	case syntax.OpConcat, syntax.OpAlternate:
		for _, sub := range re.Sub {
			n += expandedSize(sub) + 1
		}
	case syntax.OpCapture, syntax.OpStar, syntax.OpPlus, syntax.OpQuest:
		n = expandedSize(re.Sub[0]) + 2
	case syntax.OpRepeat:
		times := re.Max
		if times < 0 {
			times = re.Min + 1
		}
		n = (expandedSize(re.Sub[0]) + 1) * max(times, 1)
	default:
		n = 1
	}
	return min(n, capAt)
}
