package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// The deposed-leader family (issue 24): a leader that appended entries it
// could not commit is deposed, the new leader truncates that suffix from
// its log, and it is then killed and restarted. raft-wal v0.4.0 sealed the
// truncated segment without its index block, so the restarted server could
// not open its log again (raft-wal issue 31: "sealed segment has no index
// block", a panic in raft.NewRaft, at every restart: a crash loop). The
// fault suite had not met it: it ran the wal store on one server of three,
// and a leader killed in the other families has rarely been isolated long
// enough to append what the others never saw.

// Raft's log lines (hashicorp/raft v1.7) that say what happened to a
// server's log; counted in the run's summary.
const (
	markSuffix   = "clearing log suffix"       // a follower truncated a conflicting tail
	markSnapshot = "Installed remote snapshot" // a follower installed the leader's snapshot
)

// deposedLeader isolates the leader (iptables, as isolate-leader) while a
// burst of writes goes through it, so that it appends entries it cannot
// commit; once the majority has elected another leader, heals, so that the
// new leader's entries conflict with that tail and the old leader truncates
// it ("clearing log suffix" in its log); then kill -9s it and restarts it
// after 0-2 s. It took effect when its log shows the truncation and the
// kill and the restart did what they should; whether it then comes up is
// for the process watch (a crash fails the run) and the catch-up check.
func (nm *nemesis) deposedLeader(ctx context.Context) fault {
	// Begin just after the leader took a snapshot. Its uncommitted entries
	// count towards the snapshot threshold: begun near it, the cut-off
	// leader snapshots at its commit index, just below the tail to be
	// truncated, and the restart then reads nothing of the truncated
	// segment (raft reads back only what follows the snapshot), so a
	// store that cannot read that segment goes unnoticed (raft-wal v0.4.0
	// did in 2 of 3 -nemesis all runs).
	fresh := false
	if l, _ := nm.db.leader(ctx); l >= 0 {
		fresh = nm.nextSnapshot(ctx, l, 10*time.Second)
	}
	f, l, term, ok := nm.withLeader(ctx, "deposed-leader")
	if !ok {
		return f
	}
	n := nm.db.nodes[l]
	mark := logSize(n.Log)
	// Writes through the leader before, during and after the cut: the
	// ones it takes after the cut are appended to its log only.
	// (nm.load stops at the heal; its writes cut short are unknown.)
	lctx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	done := make(chan int, 1)
	go func() { done <- nm.load(lctx, l, time.Minute) }()
	nm.sleep(ctx, 300*time.Millisecond)
	nm.net.isolate(n.IP)
	cut := nm.net.rules() > 0
	elected := cut && nm.newLeaderBeyond(ctx, l, term, 10*nm.db.hbTimeout+2*time.Second)
	nm.sleep(ctx, time.Duration(nm.rng.Intn(1000))*time.Millisecond)
	nm.net.heal()
	stopLoad()
	writes := <-done
	// The new leader's first append to it finds the conflict.
	var truncations int
	var last string
	nm.waitFor(ctx, 10*time.Second, 100*time.Millisecond, func() bool {
		truncations, last, _ = countLog(n.Log, mark, markSuffix)
		return truncations > 0
	})

	// What the restart will read: raft reads back the entries after its
	// last snapshot, so a store that lost the truncated segment's index
	// fails there only if that snapshot is below the truncation.
	snap := "?"
	if h, err := nm.db.health(ctx, l); err == nil {
		snap = fmt.Sprint(h.LastSnapshotIndex)
	}
	old := nm.db.pid(l)
	err := nm.db.kill(l)
	gone := err == nil && old != 0 && !nm.db.running(l)
	delay := time.Duration(nm.rng.Int63n(int64(2*time.Second) + 1))
	nm.sleep(ctx, delay)
	err = nm.db.start(l)
	back := err == nil && nm.db.pid(l) != 0 && nm.db.pid(l) != old
	up := false
	nm.waitFor(ctx, 10*time.Second, 100*time.Millisecond, func() bool {
		_, err := nm.db.health(ctx, l)
		up = err == nil
		return up || !nm.db.running(l)
	})
	f.Effect = elected && truncations > 0 && gone && back
	f.Detail = fmt.Sprintf("%s (leader in term %d) cut off under %d burst writes through it; another elected: %v; healed; its log truncated %d times (%s), its last snapshot at %s (begun after a fresh one: %v); killed (pid %d gone: %v), restarted after %v (new process: %v); answering: %v",
		n.Name, term, writes, elected, truncations, strings.TrimSpace(afterTime(last)), snap, fresh, old, gone, delay.Round(time.Millisecond), back, up)
	nm.recoverAll(ctx)
	return f
}

// nextSnapshot waits up to d for node i to take a snapshot, and reports
// whether it did.
func (nm *nemesis) nextSnapshot(ctx context.Context, i int, d time.Duration) bool {
	h, err := nm.db.health(ctx, i)
	if err != nil {
		return false
	}
	return nm.waitFor(ctx, d, 50*time.Millisecond, func() bool {
		now, err := nm.db.health(ctx, i)
		return err == nil && now.LastSnapshotIndex > h.LastSnapshotIndex
	})
}

// logSize is the size of the file at path (0 if it cannot be read): where
// what is logged from now on starts.
func logSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// countLog counts the lines of the log at path, from byte offset from on,
// that contain needle, and returns the last of them.
func countLog(path string, from int64, needle string) (n int, last string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return 0, "", err
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		if strings.Contains(sc.Text(), needle) {
			n++
			last = sc.Text()
		}
	}
	return n, last, sc.Err()
}

// afterTime drops the timestamp that starts a logger's line.
func afterTime(line string) string {
	if logLine.MatchString(line) {
		if i := strings.IndexByte(line, ' '); i > 0 {
			return line[i+1:]
		}
	}
	return line
}

// raftLogMarks counts, per server, the truncations of a conflicting tail
// and the snapshot installs its logs show over the run: the proof that the
// run reached those paths of the log store.
func raftLogMarks(d *db) string {
	var b strings.Builder
	for _, m := range []struct{ what, needle string }{{"log suffix truncations", markSuffix}, {"remote snapshots installed", markSnapshot}} {
		total := 0
		var per []string
		for _, n := range d.nodes {
			c, _, err := countLog(n.Log, 0, m.needle)
			if err != nil {
				per = append(per, fmt.Sprintf("%s ?(%v)", n.Name, err))
				continue
			}
			total += c
			per = append(per, fmt.Sprintf("%s %d", n.Name, c))
		}
		fmt.Fprintf(&b, "%s (%q in the logs): %d (%s)\n", m.what, m.needle, total, strings.Join(per, ", "))
	}
	return b.String()
}
