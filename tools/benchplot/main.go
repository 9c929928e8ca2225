// Command benchplot draws a curve from Go benchmark results: one line per
// benchmark, its x the value of one sub-benchmark key (hosts=N,
// watchers=N), its y one unit (ns/op, or a metric the benchmark reports).
// docs/benchmarks.md's pictures are made with it from the runs' own
// output, so a picture is never drawn by hand:
//
//	go test -run XXX -bench ApplyHosts ./fsm | tee fsm.txt
//	cd tools/benchplot && go run . -x hosts -unit ns/op -scale 1e-3 \
//	    -ylabel "µs per write" -o ../../docs/figures/fsm-write.svg ../../fsm.txt
//
// Input is the standard benchmark format (golang.org/x/perf/benchfmt:
// `go test -bench` output, or anything printing those lines, such as
// plugreg-bench -fleet). A name seen more than once (-count) is drawn at
// its median. It is its own module, so the product's go.mod does not
// carry the plotting library.
package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/perf/benchfmt"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

type options struct {
	x, unit, by   string
	scale         float64
	title, ylabel string
	xlabel, out   string
	match         *regexp.Regexp
	logX, logY    bool
	width, height vg.Length
	inputs        []string
}

func main() {
	if err := run(os.Args[1:], os.Stdin); err != nil {
		fmt.Fprintln(os.Stderr, "benchplot:", err)
		os.Exit(1)
	}
}

func run(args []string, stdin io.Reader) error {
	o, err := parseFlags(args)
	if err != nil {
		return err
	}
	series, err := readSeries(o, stdin)
	if err != nil {
		return err
	}
	if len(series) == 0 {
		return fmt.Errorf("no result has both the key %q and the unit %q", o.x, o.unit)
	}
	return draw(o, series)
}

func parseFlags(args []string) (*options, error) {
	fs := flag.NewFlagSet("benchplot", flag.ContinueOnError)
	o := &options{}
	var match string
	var w, h float64
	fs.StringVar(&o.x, "x", "", "the sub-benchmark key whose value is x (hosts for .../hosts=1000/...); required")
	fs.StringVar(&o.unit, "unit", "ns/op", "the unit whose value is y")
	fs.Float64Var(&o.scale, "scale", 1, "multiply y by this (1e-3: ns to µs)")
	fs.StringVar(&o.by, "by", "", "a file configuration key (a `key: value` line of the input) whose value is added to each line's name (e.g. a run's label)")
	fs.StringVar(&match, "match", "", "draw only the benchmarks whose full name matches this regexp")
	fs.StringVar(&o.title, "title", "", "the picture's title")
	fs.StringVar(&o.xlabel, "xlabel", "", "x axis label (default: the key)")
	fs.StringVar(&o.ylabel, "ylabel", "", "y axis label (default: the unit)")
	fs.BoolVar(&o.logX, "logx", true, "x on a log scale")
	fs.BoolVar(&o.logY, "logy", false, "y on a log scale")
	fs.Float64Var(&w, "width", 16, "width in cm")
	fs.Float64Var(&h, "height", 9, "height in cm")
	fs.StringVar(&o.out, "o", "", "output file; its extension picks the format (.svg, .png); required")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if o.x == "" || o.out == "" {
		return nil, errors.New("-x and -o are required")
	}
	if match != "" {
		re, err := regexp.Compile(match)
		if err != nil {
			return nil, fmt.Errorf("-match: %w", err)
		}
		o.match = re
	}
	o.width, o.height = vg.Length(w)*vg.Centimeter, vg.Length(h)*vg.Centimeter
	o.inputs = fs.Args()
	return o, nil
}

// series is one line: y values by x, every value seen (medians drawn).
type series struct {
	name string
	ys   map[float64][]float64
}

func readSeries(o *options, stdin io.Reader) ([]*series, error) {
	byName := map[string]*series{}
	var order []string
	read := func(r io.Reader, file string) error {
		br := benchfmt.NewReader(r, file)
		for br.Scan() {
			res, ok := br.Result().(*benchfmt.Result)
			if !ok {
				continue // a syntax error or a unit line: benchfmt keeps going
			}
			if o.match != nil && !o.match.Match(res.Name.Full()) {
				continue
			}
			name, x, ok := splitName(res.Name, o.x)
			if !ok {
				continue
			}
			y, ok := valueOf(res, o.unit)
			if !ok {
				continue
			}
			if o.by != "" {
				if v := res.GetConfig(o.by); v != "" {
					name += " (" + v + ")"
				}
			}
			s := byName[name]
			if s == nil {
				s = &series{name: name, ys: map[float64][]float64{}}
				byName[name] = s
				order = append(order, name)
			}
			s.ys[x] = append(s.ys[x], y*o.scale)
		}
		return br.Err()
	}
	if len(o.inputs) == 0 {
		if err := read(stdin, "stdin"); err != nil {
			return nil, err
		}
	}
	for _, f := range o.inputs {
		fh, err := os.Open(f)
		if err != nil {
			return nil, err
		}
		err = read(fh, f)
		fh.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
	}
	out := make([]*series, 0, len(order))
	for _, n := range order {
		out = append(out, byName[n])
	}
	return out, nil
}

// splitName returns the benchmark's name without its key=value part for
// key and its GOMAXPROCS suffix, and the value of key.
func splitName(n benchfmt.Name, key string) (string, float64, bool) {
	base, parts := n.Parts()
	name := []string{strings.TrimPrefix(string(base), "Benchmark")}
	x, found := 0.0, false
	for _, p := range parts {
		s := string(p)
		if strings.HasPrefix(s, "-") {
			continue // GOMAXPROCS
		}
		s = strings.TrimPrefix(s, "/")
		if k, v, ok := strings.Cut(s, "="); ok && k == key {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return "", 0, false
			}
			x, found = f, true
			continue
		}
		name = append(name, s)
	}
	return strings.Join(name, "/"), x, found
}

// valueOf is res's value in unit as the benchmark printed it (benchfmt
// turns ns/op into sec/op; a picture in µs should not depend on that).
func valueOf(res *benchfmt.Result, unit string) (float64, bool) {
	for _, v := range res.Values {
		switch unit {
		case v.OrigUnit:
			return v.OrigValue, true
		case v.Unit:
			return v.Value, true
		}
	}
	return 0, false
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func draw(o *options, all []*series) error {
	p := plot.New()
	p.Title.Text = o.title
	p.X.Label.Text = cmp.Or(o.xlabel, o.x)
	p.Y.Label.Text = cmp.Or(o.ylabel, o.unit)
	if o.logX {
		p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	}
	if o.logY {
		p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	} else {
		p.Y.Min = 0
	}
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, true
	var lines []interface{}
	top := 0.0
	for _, s := range all {
		xs := make([]float64, 0, len(s.ys))
		for x := range s.ys {
			xs = append(xs, x)
		}
		slices.Sort(xs)
		pts := make(plotter.XYs, len(xs))
		for i, x := range xs {
			pts[i] = plotter.XY{X: x, Y: median(s.ys[x])}
			top = max(top, pts[i].Y)
		}
		lines = append(lines, s.name, pts)
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return err
	}
	if !o.logY {
		p.Y.Max = top * (1.15 + 0.08*float64(len(all))) // room for the legend above the lines
	}
	return p.Save(o.width, o.height, o.out)
}
