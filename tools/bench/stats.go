package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// stats summarises one cell: one system, one workload, one concurrency.
// Latencies are in milliseconds.
type stats struct {
	Ops        int     `json:"ops"`
	Errors     int     `json:"errors"`
	Seconds    float64 `json:"seconds"`
	Throughput float64 `json:"ops_per_sec"`
	P50        float64 `json:"p50_ms"`
	P99        float64 `json:"p99_ms"`
	P999       float64 `json:"p999_ms"`
	Max        float64 `json:"max_ms"`
	// Missed counts watch deliveries that never arrived.
	Missed int `json:"missed,omitempty"`
	// Writes counts the acknowledged writes of the cell: Ops for
	// register and deregister, the writers' writes for watch (whose Ops
	// are deliveries), none for list.
	Writes int `json:"writes"`
	// Raft is what the system's Raft log did during the cell; nil when
	// a member's metrics could not be read.
	Raft *raftActivity `json:"raft,omitempty"`
	// ServerCPUPerOp is the CPU time the system's three server
	// processes used during the cell, per operation (ms): what one
	// operation costs the cluster, independent of how busy the shared
	// machine was.
	ServerCPUPerOp float64 `json:"server_cpu_ms_per_op"`
	// ClientCPUPerOp is the CPU time the bench process itself (the load
	// generator: the system's client library, its encodings, the
	// workers) used during the cell, per operation (ms). It shares the
	// two cores with the servers: a client that costs more CPU per
	// operation leaves less to its servers.
	ClientCPUPerOp float64 `json:"client_cpu_ms_per_op"`
	FirstErr       string  `json:"first_error,omitempty"`
	Unit           string  `json:"unit"`
}

func summarize(lat []time.Duration, errs int, elapsed time.Duration, unit string) stats {
	slices.Sort(lat)
	s := stats{Ops: len(lat), Errors: errs, Seconds: elapsed.Seconds(), Unit: unit}
	if elapsed > 0 {
		s.Throughput = float64(len(lat)) / elapsed.Seconds()
	}
	s.P50, s.P99, s.P999 = pct(lat, 0.5), pct(lat, 0.99), pct(lat, 0.999)
	if len(lat) > 0 {
		s.Max = ms(lat[len(lat)-1])
	}
	return s
}

// pct is the nearest-rank percentile of sorted lat, in milliseconds.
func pct(lat []time.Duration, p float64) float64 {
	if len(lat) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(p*float64(len(lat)))) - 1
	i = max(0, min(i, len(lat)-1))
	return ms(lat[i])
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// cell is one row of the table: both systems on one workload at one
// concurrency, with plugreg/etcd ratios (throughput: higher is better for
// plugreg; latency: lower is).
type cell struct {
	Workload string           `json:"workload"`
	Clients  int              `json:"clients"`
	Results  map[string]stats `json:"results"`
	Ratio    ratio            `json:"ratio_plugreg_over_etcd"`
	// RatioBaseline is plugreg/baseline when the run has a baseline.
	RatioBaseline *ratio `json:"ratio_plugreg_over_baseline,omitempty"`
}

type ratio struct {
	Throughput float64 `json:"throughput"`
	P50        float64 `json:"p50"`
	P99        float64 `json:"p99"`
	P999       float64 `json:"p999"`
	CPUPerOp   float64 `json:"server_cpu_per_op"`
	ClientCPU  float64 `json:"client_cpu_per_op"`
}

func (c *cell) computeRatio() {
	p := c.Results["plugreg"]
	c.Ratio = ratioOf(p, c.Results["etcd"])
	if b, ok := c.Results["baseline"]; ok {
		r := ratioOf(p, b)
		c.RatioBaseline = &r
	}
}

// latencyRatio is ratioOf without throughput or CPU (failover: a
// duration per round, no rate; a NaN would not encode as JSON).
func latencyRatio(p, e stats) ratio {
	return ratio{P50: div(p.P50, e.P50), P99: div(p.P99, e.P99), P999: div(p.P999, e.P999)}
}

func ratioOf(p, e stats) ratio {
	return ratio{Throughput: div(p.Throughput, e.Throughput), P50: div(p.P50, e.P50), P99: div(p.P99, e.P99), P999: div(p.P999, e.P999), CPUPerOp: div(p.ServerCPUPerOp, e.ServerCPUPerOp),
		ClientCPU: div(p.ClientCPUPerOp, e.ClientCPUPerOp)}
}

func div(a, b float64) float64 {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return math.NaN()
	}
	return a / b
}

func f(v float64, prec int) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return fmt.Sprintf("%.*f", prec, v)
}

// opsPerFsync is the table's figure for how many writes one fsync of the
// leader covered: "-" for a cell without writes or without the figure.
func opsPerFsync(st stats) string {
	if st.Raft == nil || st.Raft.OpsPerLeaderFsync == 0 {
		return "-"
	}
	return f(st.Raft.OpsPerLeaderFsync, 1)
}

// snapshots is the table's count of snapshots the members of a and b took
// during a cell, "a,b", or "-" when there were none.
func snapshots(a, b stats) string {
	n := func(st stats) float64 {
		if st.Raft == nil {
			return 0
		}
		return st.Raft.Snapshots
	}
	if n(a) == 0 && n(b) == 0 {
		return "-"
	}
	return f(n(a), 0) + "," + f(n(b), 0)
}

func printTable(w io.Writer, cells []*cell) {
	fmt.Fprintf(w, "%-19s %4s | %9s %8s %8s %8s | %9s %8s %8s %8s | %6s %6s %6s %6s %6s %6s | %7s %7s %5s | %s\n",
		"workload", "cli", "plugreg/s", "p50ms", "p99ms", "p999ms", "etcd/s", "p50ms", "p99ms", "p999ms",
		"x/s", "x p50", "x p99", "x p999", "x cpu", "x gen", "p op/fs", "e op/fs", "snaps", "errors/missed (plugreg, etcd)")
	fmt.Fprintln(w, strings.Repeat("-", 188))
	for _, c := range cells {
		p, e := c.Results["plugreg"], c.Results["etcd"]
		fmt.Fprintf(w, "%-19s %4d | %9s %8s %8s %8s | %9s %8s %8s %8s | %6s %6s %6s %6s %6s %6s | %7s %7s %5s | %d/%d, %d/%d\n",
			c.Workload, c.Clients,
			f(p.Throughput, 0), f(p.P50, 2), f(p.P99, 2), f(p.P999, 2),
			f(e.Throughput, 0), f(e.P50, 2), f(e.P99, 2), f(e.P999, 2),
			f(c.Ratio.Throughput, 2), f(c.Ratio.P50, 2), f(c.Ratio.P99, 2), f(c.Ratio.P999, 2), f(c.Ratio.CPUPerOp, 2), f(c.Ratio.ClientCPU, 2),
			opsPerFsync(p), opsPerFsync(e), snapshots(p, e),
			p.Errors, p.Missed, e.Errors, e.Missed)
	}
	fmt.Fprintln(w, "op/fs: acknowledged writes per fsync of the Raft log on the leader (p plugreg, e etcd); snaps: snapshots the members took in the cell (plugreg,etcd)")
}

// printBaseline prints plugreg against the baseline cluster of the same
// run (-baseline-bin, -baseline-flags).
func printBaseline(w io.Writer, cells []*cell) {
	fmt.Fprintf(w, "\n%-19s %4s | %9s %8s %8s | %9s %8s %8s | %6s %6s %6s %6s | %7s %7s %5s | %s\n",
		"plugreg/baseline", "cli", "plugreg/s", "p50ms", "p99ms", "base/s", "p50ms", "p99ms",
		"x/s", "x p50", "x p99", "x cpu", "p op/fs", "b op/fs", "snaps", "errors/missed (baseline)")
	fmt.Fprintln(w, strings.Repeat("-", 144))
	for _, c := range cells {
		if c.RatioBaseline == nil {
			continue
		}
		p, b := c.Results["plugreg"], c.Results["baseline"]
		fmt.Fprintf(w, "%-19s %4d | %9s %8s %8s | %9s %8s %8s | %6s %6s %6s %6s | %7s %7s %5s | %d/%d\n",
			c.Workload, c.Clients,
			f(p.Throughput, 0), f(p.P50, 2), f(p.P99, 2),
			f(b.Throughput, 0), f(b.P50, 2), f(b.P99, 2),
			f(c.RatioBaseline.Throughput, 2), f(c.RatioBaseline.P50, 2), f(c.RatioBaseline.P99, 2), f(c.RatioBaseline.CPUPerOp, 2),
			opsPerFsync(p), opsPerFsync(b), snapshots(p, b),
			b.Errors, b.Missed)
	}
}
