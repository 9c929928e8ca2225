package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// scaleSystem is one system's scale figures.
type scaleSystem struct {
	Instances    int     `json:"instances"`
	LoadSeconds  float64 `json:"load_seconds"`
	LoadRate     float64 `json:"load_writes_per_sec"`
	LoadErrors   int     `json:"load_errors"`
	RSSBytes     []int64 `json:"rss_bytes_per_node"`
	PeakRSSBytes []int64 `json:"peak_rss_bytes_per_node"`
	DiskBytes    []int64 `json:"data_dir_bytes_per_node"`
	// Snapshot: plugreg's Raft snapshot as raft takes it on its own (the
	// first one that starts after the load, on the leader); etcd's is a
	// Maintenance.Snapshot (backup) streamed from the leader.
	SnapshotKind    string  `json:"snapshot_kind"`
	SnapshotBytes   int64   `json:"snapshot_bytes"`
	SnapshotSeconds float64 `json:"snapshot_seconds"`
	// Writes of a 16-client register load that overlapped the snapshot,
	// and the rest of that load.
	WritesDuringSnapshot  int     `json:"writes_during_snapshot"`
	MaxWriteDuringSnapMs  float64 `json:"max_write_ms_during_snapshot"`
	P99WriteDuringSnapMs  float64 `json:"p99_write_ms_during_snapshot"`
	MaxWriteOutsideSnapMs float64 `json:"max_write_ms_outside_snapshot"`
	P99WriteOutsideSnapMs float64 `json:"p99_write_ms_outside_snapshot"`
	RestartSeconds        float64 `json:"restart_to_ready_seconds"`
	Note                  string  `json:"note,omitempty"`
}

type scaleReport struct {
	Names, Allocs, Types int
	Systems              map[string]*scaleSystem `json:"systems"`
}

func runScale(ctx context.Context, o *options, systems []system, dir string) (*scaleReport, error) {
	rep := &scaleReport{Names: o.scaleNames, Allocs: o.scaleAllocs, Types: o.scaleTypes, Systems: map[string]*scaleSystem{}}
	for _, s := range systems {
		if s.name() == "etcd" && !o.scaleEtcd {
			continue
		}
		ss, err := scaleOne(ctx, o, s, dir)
		if err != nil {
			return rep, err
		}
		rep.Systems[s.name()] = ss
	}
	return rep, nil
}

func scaleOne(ctx context.Context, o *options, s system, dir string) (*scaleSystem, error) {
	total := o.scaleNames * o.scaleAllocs
	ss := &scaleSystem{Instances: total}
	ws, err := newWriters(s, o.scaleClients, 0)
	if err != nil {
		return nil, err
	}
	defer ws.close()

	// Load: allocation-major order, so that every recency list grows
	// evenly, as a cluster of nodes starting allocations would.
	logf("scale %s: loading %d instances with %d writers", s.name(), total, o.scaleClients)
	var next atomic.Int64
	var progress atomic.Int64
	stopProgress := make(chan struct{})
	go func() {
		t := time.NewTicker(15 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case <-t.C:
				logf("scale %s: %d/%d", s.name(), progress.Load(), total)
			}
		}
	}()
	st := closedLoop(ctx, o.scaleClients, 24*time.Hour, "writes", func(ctx context.Context, w, i int) error {
		k := int(next.Add(1)) - 1
		if k >= total {
			return errExhausted
		}
		err := ws.cs[w].register(ctx, scaleRec(o, k))
		if err == nil {
			progress.Add(1)
		}
		return err
	})
	close(stopProgress)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	ss.LoadSeconds, ss.LoadRate, ss.LoadErrors = st.Seconds, st.Throughput, st.Errors
	logf("scale %s: loaded in %.0fs (%.0f writes/s, %d errors)", s.name(), st.Seconds, st.Throughput, st.Errors)

	// Let the runtime settle (GC after the load) before reading memory.
	time.Sleep(5 * time.Second)
	for i := 0; i < members; i++ {
		rss, _ := procStatus(s.pid(i), "VmRSS:")
		hwm, _ := procStatus(s.pid(i), "VmHWM:")
		ss.RSSBytes = append(ss.RSSBytes, rss)
		ss.PeakRSSBytes = append(ss.PeakRSSBytes, hwm)
	}

	switch sys := s.(type) {
	case *plugregSystem:
		err = plugregSnapshot(ctx, sys, ws, ss)
	case *etcdSystem:
		err = etcdSnapshot(ctx, sys, ws, ss, dir)
	}
	if err != nil {
		return nil, err
	}
	for i := 0; i < members; i++ {
		switch sys := s.(type) {
		case *plugregSystem:
			ss.DiskBytes = append(ss.DiskBytes, dirSize(sys.c.nodes[i].dataDir))
		case *etcdSystem:
			ss.DiskBytes = append(ss.DiskBytes, dirSize(filepath.Join(dir, "etcd-"+sys.c.members[i].name)))
		}
	}
	if ss.RestartSeconds, err = restartToReady(ctx, s); err != nil {
		return nil, err
	}
	logf("scale %s: %+v", s.name(), *ss)
	return ss, nil
}

func scaleRec(o *options, k int) rec {
	name := k % o.scaleNames
	alloc := k / o.scaleNames
	return rec{Type: fmt.Sprintf("type-%02d", name%o.scaleTypes), Name: fmt.Sprintf("name-%05d", name), Alloc: fmt.Sprintf("alloc-%03d", alloc)}
}

// timedWrite is one write of the background load, for overlap with a
// snapshot window.
type timedWrite struct{ start, end time.Time }

// backgroundLoad runs a 16-client register load until stop is closed and
// returns every acknowledged write's interval.
func backgroundLoad(ctx context.Context, ws *clientPool[writer], stop <-chan struct{}) []timedWrite {
	var mu sync.Mutex
	var out []timedWrite
	var wg sync.WaitGroup
	var seq atomic.Int64
	for w := 0; w < 16 && w < len(ws.cs); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				n := seq.Add(1)
				r := rec{Type: "snapload", Name: fmt.Sprintf("name-%04d", n%1000), Alloc: fmt.Sprintf("s-%08d", n)}
				octx, cancel := context.WithTimeout(ctx, opTimeout)
				t0 := time.Now()
				err := ws.cs[w].register(octx, r)
				t1 := time.Now()
				cancel()
				if err == nil {
					mu.Lock()
					out = append(out, timedWrite{t0, t1})
					mu.Unlock()
				}
				if ctx.Err() != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	return out
}

// splitBySnapshot fills the during/outside figures of ss from the writes
// and the snapshot window [from, to].
func splitBySnapshot(ss *scaleSystem, writes []timedWrite, from, to time.Time) {
	var in, outside []time.Duration
	for _, w := range writes {
		if w.start.Before(to) && w.end.After(from) {
			in = append(in, w.end.Sub(w.start))
		} else {
			outside = append(outside, w.end.Sub(w.start))
		}
	}
	si, so := summarize(in, 0, 0, "writes"), summarize(outside, 0, 0, "writes")
	ss.WritesDuringSnapshot = len(in)
	ss.MaxWriteDuringSnapMs, ss.P99WriteDuringSnapMs = si.Max, si.P99
	ss.MaxWriteOutsideSnapMs, ss.P99WriteOutsideSnapMs = so.Max, so.P99
}

// plugregSnapshot waits, under a write load, for the leader to take a Raft
// snapshot on its own (raft's snapshot-threshold and interval decide
// when) and times it by the life of its .tmp dir in the snapshot store.
func plugregSnapshot(ctx context.Context, s *plugregSystem, ws *clientPool[writer], ss *scaleSystem) error {
	l, err := s.leader(ctx)
	if err != nil {
		return err
	}
	snapDir := filepath.Join(s.c.nodes[l].dataDir, "snapshots")
	ss.SnapshotKind = "raft snapshot (automatic, leader)"
	stop := make(chan struct{})
	res := make(chan []timedWrite, 1)
	go func() { res <- backgroundLoad(ctx, ws, stop) }()
	var from, to time.Time
	var tmpName string
	deadline := time.Now().Add(150 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		ents, _ := os.ReadDir(snapDir)
		tmp := ""
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".tmp") {
				tmp = e.Name()
			}
		}
		switch {
		case from.IsZero() && tmp != "":
			from, tmpName = time.Now(), tmp
		case !from.IsZero() && tmp == "":
			to = time.Now()
		}
		if !to.IsZero() {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	// Keep the load on a little past the snapshot, for the contrast.
	time.Sleep(2 * time.Second)
	close(stop)
	writes := <-res
	if to.IsZero() {
		ss.Note = "no snapshot completed on the leader within 150s of load"
		return nil
	}
	ss.SnapshotSeconds = to.Sub(from).Seconds()
	ss.SnapshotBytes = dirSize(filepath.Join(snapDir, strings.TrimSuffix(tmpName, ".tmp")))
	splitBySnapshot(ss, writes, from, to)
	return nil
}

// etcdSnapshot streams a Maintenance.Snapshot from the leader to a file
// under a write load.
func etcdSnapshot(ctx context.Context, s *etcdSystem, ws *clientPool[writer], ss *scaleSystem, dir string) error {
	l, err := s.leader(ctx)
	if err != nil {
		return err
	}
	ss.SnapshotKind = "Maintenance.Snapshot (backup) from the leader"
	cli, err := newEtcdClient(s.c.members[l].endpoint())
	if err != nil {
		return err
	}
	defer cli.Close()
	stop := make(chan struct{})
	res := make(chan []timedWrite, 1)
	go func() { res <- backgroundLoad(ctx, ws, stop) }()
	time.Sleep(2 * time.Second)
	from := time.Now()
	n, serr := streamSnapshot(ctx, cli, filepath.Join(dir, "etcd-backup.db"))
	to := time.Now()
	time.Sleep(2 * time.Second)
	close(stop)
	writes := <-res
	if serr != nil {
		return serr
	}
	os.Remove(filepath.Join(dir, "etcd-backup.db"))
	ss.SnapshotSeconds, ss.SnapshotBytes = to.Sub(from).Seconds(), n
	splitBySnapshot(ss, writes, from, to)
	return nil
}

func streamSnapshot(ctx context.Context, cli *clientv3.Client, path string) (int64, error) {
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		return 0, fmt.Errorf("etcd snapshot: %w", err)
	}
	defer rc.Close()
	fh, err := os.Create(path)
	if err != nil {
		return 0, fmt.Errorf("create %s: %w", path, err)
	}
	n, err := io.Copy(fh, rc)
	if err == nil {
		err = fh.Sync() // etcdctl snapshot save syncs too
	}
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, fmt.Errorf("etcd snapshot to %s: %w", path, err)
	}
	return n, nil
}

// restartToReady kills a follower (SIGKILL), restarts it and times until
// it serves again and has caught up with the leader's index at the kill.
func restartToReady(ctx context.Context, s system) (float64, error) {
	l, err := s.leader(ctx)
	if err != nil {
		return 0, err
	}
	f := (l + 1) % members
	want, err := appliedIndex(ctx, s, l)
	if err != nil {
		return 0, err
	}
	s.kill(f)
	t0 := time.Now()
	if err := s.restart(f); err != nil {
		return 0, err
	}
	ok := waitFor(ctx, 10*time.Minute, func() bool {
		got, err := appliedIndex(ctx, s, f)
		return err == nil && got >= want
	})
	d := time.Since(t0)
	if !ok {
		return 0, fmt.Errorf("%s: node %d not ready 10 minutes after restart", s.name(), f)
	}
	return d.Seconds(), s.waitReady(ctx, 60*time.Second)
}

// appliedIndex is node i's applied index, once it serves with a leader.
func appliedIndex(ctx context.Context, s system, i int) (uint64, error) {
	switch sys := s.(type) {
	case *plugregSystem:
		h, err := sys.c.health(ctx, sys.c.nodes[i])
		return h.AppliedIndex, err
	case *etcdSystem:
		cli, err := newEtcdClient(sys.c.members[i].endpoint())
		if err != nil {
			return 0, err
		}
		defer cli.Close()
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		st, err := cli.Status(sctx, sys.c.members[i].endpoint())
		if err != nil {
			return 0, err
		}
		if st.Leader == 0 {
			return 0, fmt.Errorf("no leader")
		}
		return st.RaftAppliedIndex, nil
	}
	return 0, fmt.Errorf("unknown system %T", s)
}

func printScale(w io.Writer, r *scaleReport) {
	fmt.Fprintf(w, "\nscale: %d names x %d allocs over %d types\n", r.Names, r.Allocs, r.Types)
	names := make([]string, 0, len(r.Systems))
	for n := range r.Systems {
		names = append(names, n)
	}
	sort.Strings(names)
	mib := func(v int64) string { return fmt.Sprintf("%.0f", float64(v)/(1<<20)) }
	for _, n := range names {
		s := r.Systems[n]
		var rss, hwm, disk []string
		for i := range s.RSSBytes {
			rss, hwm = append(rss, mib(s.RSSBytes[i])), append(hwm, mib(s.PeakRSSBytes[i]))
		}
		for _, d := range s.DiskBytes {
			disk = append(disk, mib(d))
		}
		fmt.Fprintf(w, "%s: load %.0fs (%.0f writes/s, %d errors); RSS MiB per node %s (peak %s); data dir MiB %s\n",
			n, s.LoadSeconds, s.LoadRate, s.LoadErrors, strings.Join(rss, "/"), strings.Join(hwm, "/"), strings.Join(disk, "/"))
		fmt.Fprintf(w, "  snapshot (%s): %.1f MiB in %.2fs; writes during it %d, max %.1fms p99 %.1fms (outside: max %.1fms p99 %.1fms)\n",
			s.SnapshotKind, float64(s.SnapshotBytes)/(1<<20), s.SnapshotSeconds, s.WritesDuringSnapshot,
			s.MaxWriteDuringSnapMs, s.P99WriteDuringSnapMs, s.MaxWriteOutsideSnapMs, s.P99WriteOutsideSnapMs)
		fmt.Fprintf(w, "  restart of a follower (kill -9) to caught up: %.2fs %s\n", s.RestartSeconds, s.Note)
	}
}
