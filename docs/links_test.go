package docs_test

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// The reference pages begin with what a user looks for and stay short:
// dated runs, rounds and investigations belong in docs/results/.
func TestReferencePagesAreShort(t *testing.T) {
	for _, name := range []string{"benchmarks.md", "jepsen.md", "operations.md"} {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(b), "\n"); n >= 300 {
			t.Errorf("%s has %d lines; a reference page stays under 300: move dated material to docs/results/", name, n)
		}
	}
}

// Every relative link in the docs, the results log and the README names a
// file that exists and, when it names a section of a markdown file, a
// heading of that file (GitHub's anchors).
func TestRelativeLinksResolve(t *testing.T) {
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	results, err := filepath.Glob("results/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, results...)
	files = append(files, "../README.md", "../tools/jepsen/README.md")
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		a := headingAnchors(t, path)
		anchors[path] = a
		return a
	}
	for _, file := range files {
		for _, l := range links(t, file) {
			target, frag, _ := strings.Cut(l.target, "#")
			path := file
			if target != "" {
				path = filepath.Join(filepath.Dir(file), target)
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s:%d: link to %s: no such file", file, l.line, l.target)
					continue
				}
			}
			if frag == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			if !anchorsOf(path)[frag] {
				t.Errorf("%s:%d: link to %s: %s has no heading with anchor #%s", file, l.line, l.target, path, frag)
			}
		}
	}
}

type link struct {
	line   int
	target string
}

var (
	linkRE   = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	codeSpan = regexp.MustCompile("`[^`]*`")
	schemeRE = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// links returns the relative links of a markdown file, outside fenced
// code blocks and code spans.
func links(t *testing.T, path string) []link {
	t.Helper()
	var out []link
	eachLine(t, path, func(n int, line string) {
		for _, m := range linkRE.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, ""), -1) {
			if target := m[1]; !schemeRE.MatchString(target) {
				out = append(out, link{n, target})
			}
		}
	}, nil)
	return out
}

// headingAnchors returns the anchors GitHub gives a markdown file's
// headings: lower case, punctuation dropped, spaces turned to hyphens,
// a repeated anchor numbered -1, -2, ...
func headingAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	seen := map[string]int{}
	out := map[string]bool{}
	eachLine(t, path, nil, func(heading string) {
		var b strings.Builder
		for _, r := range strings.ToLower(strings.ReplaceAll(heading, "`", "")) {
			switch {
			case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[a+"-"+itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	})
	return out
}

// eachLine calls text for each line outside fenced code blocks and
// heading for the text of each ATX heading.
func eachLine(t *testing.T, path string, text func(int, string), heading func(string)) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	fence := ""
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " ")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		if strings.HasPrefix(line, "#") && heading != nil {
			h := strings.TrimLeft(line, "#")
			if len(h) < len(line) && len(line)-len(h) <= 6 && strings.HasPrefix(h, " ") {
				heading(strings.TrimSpace(h))
			}
		}
		if text != nil {
			text(n, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}
