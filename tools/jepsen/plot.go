package main

import (
	"fmt"
	"math"
	"strings"

	"github.com/plugreg/plugreg/tools/jepsen/check"
)

// timeline draws latency (log scale, one dot per operation, coloured by
// outcome) and throughput (ok operations per second) over time, with the
// faults as shaded bands, as an SVG.
func timeline(r *runConfig, ops []check.Op, faults []fault) []byte {
	const (
		w, h      = 1200.0, 560.0
		left, top = 60.0, 20.0
		plotW     = w - left - 20
		latH      = 300.0
		tpTop     = top + latH + 40
		tpH       = 150.0
	)
	end := float64(r.timeLimit) * 1.1
	for _, op := range ops {
		end = math.Max(end, float64(op.End))
	}
	x := func(t int64) float64 { return left + plotW*float64(t)/end }
	minL, maxL := math.Log10(0.1), math.Log10(10000.0) // ms
	y := func(ms float64) float64 {
		l := math.Log10(math.Max(ms, 0.1))
		return top + latH - latH*(l-minL)/(maxL-minL)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`, w, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`)
	for _, f := range faults {
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#ffd6d6"><title>%s: %s</title></rect>`,
			x(f.Start), top, math.Max(1, x(f.End)-x(f.Start)), tpTop+tpH-top, f.Name, f.Detail)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="9" transform="rotate(-90 %.1f %.1f)">%s</text>`, x(f.Start)+9, top+latH-5, x(f.Start)+9, top+latH-5, f.Name)
	}
	for _, ms := range []float64{1, 10, 100, 1000, 10000} {
		fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="5" y="%.1f">%gms</text>`, left, left+plotW, y(ms), y(ms), y(ms)+4, ms)
	}
	colour := map[string]string{check.OK: "#2a7ab0", check.Fail: "#d62728", check.Unknown: "#ff9f1c"}
	for _, op := range ops {
		ms := float64(op.End-op.Start) / 1e6
		fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="1.5" fill="%s" fill-opacity="0.6"/>`, x(op.Start), y(ms), colour[op.Outcome])
	}
	// Throughput per second.
	secs := int(end/1e9) + 1
	per := make([]int, secs)
	maxTP := 1
	for _, op := range ops {
		if op.Outcome == check.OK {
			s := int(op.End / 1e9)
			if s < secs {
				per[s]++
				maxTP = max(maxTP, per[s])
			}
		}
	}
	var pts []string
	for s, n := range per {
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(int64(s)*1e9), tpTop+tpH-tpH*float64(n)/float64(maxTP)))
	}
	fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="#2a7ab0" stroke-width="1.5"/>`, strings.Join(pts, " "))
	fmt.Fprintf(&b, `<text x="5" y="%.1f">%d ok/s</text><text x="5" y="%.1f">0</text>`, tpTop+8, maxTP, tpTop+tpH)
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">time (s) — dots: latency by outcome (blue ok, red fail, orange unknown); line: ok ops/s; red bands: faults</text>`, left, h-10)
	for s := 0; s < secs; s += 10 {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%d</text>`, x(int64(s)*1e9), tpTop+tpH+14, s)
	}
	b.WriteString(`</svg>`)
	return []byte(b.String())
}
