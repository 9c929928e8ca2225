package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/perf/benchfmt"
)

func TestSplitName(t *testing.T) {
	for _, tc := range []struct {
		name, key, want string
		x               float64
		ok              bool
	}{
		{"ApplyHosts/hosts=100/register-2", "hosts", "ApplyHosts/register", 100, true},
		{"Deliver/watchers=10000/match=none-8", "watchers", "Deliver/match=none", 10000, true},
		{"Deliver/watchers=many-8", "watchers", "", 0, false},
		{"Register-2", "hosts", "", 0, false},
	} {
		got, x, ok := splitName(benchfmt.Name(tc.name), tc.key)
		if ok != tc.ok || (ok && (got != tc.want || x != tc.x)) {
			t.Errorf("splitName(%q, %q) = %q, %v, %v; want %q, %v, %v", tc.name, tc.key, got, x, ok, tc.want, tc.x, tc.ok)
		}
	}
}

// The run reads ns/op as printed (benchfmt converts it to sec/op), takes
// the median of repeated results, and writes a picture.
func TestRunDrawsMedians(t *testing.T) {
	in := strings.Join([]string{
		"BenchmarkApplyHosts/hosts=100/register-2 100 18000 ns/op",
		"BenchmarkApplyHosts/hosts=100/register-2 100 90000 ns/op",
		"BenchmarkApplyHosts/hosts=100/register-2 100 17000 ns/op",
		"BenchmarkApplyHosts/hosts=1000/register-2 100 19000 ns/op 12 cpu-µs/write",
	}, "\n")
	o, err := parseFlags([]string{"-x", "hosts", "-o", filepath.Join(t.TempDir(), "out.svg")})
	if err != nil {
		t.Fatal(err)
	}
	all, err := readSeries(o, strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || all[0].name != "ApplyHosts/register" {
		t.Fatalf("series %+v", all)
	}
	if got := median(all[0].ys[100]); got != 18000 {
		t.Errorf("median at 100 = %v, want 18000", got)
	}
	if err := run([]string{"-x", "hosts", "-unit", "cpu-µs/write", "-o", o.out}, strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(o.out); err != nil || !strings.Contains(string(b), "<svg") {
		t.Fatalf("no svg written: %v", err)
	}
	if err := run([]string{"-x", "nosuch", "-o", o.out}, strings.NewReader(in)); err == nil {
		t.Fatal("a key no result has drew a picture")
	}
}
