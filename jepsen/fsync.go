package main

import (
	"context"
	"fmt"
	"time"
)

// The fsync family: a server's disk fails an fsync of its log (its
// lazyfs's FailSync: EIO, and the dirty pages dropped as Linux drops them
// after a failed writeback), during a burst of writes. The server must
// stop by itself with status 65 (the harness expects that exit, and no
// other); then its power is cut, which takes what the failed fsync
// covered; then it is replaced as docs/operations.md says: removed from
// the configuration, started on an empty data dir, and made a voter
// again. Nothing acknowledged may be lost, and every server must be back
// and caught up at the end.

// fsyncExit is the status of an agent whose log's fsync failed
// (cluster.StoreError, cmd/plugreg's exitDataErr).
const fsyncExit = "exit status 65"

func (nm *nemesis) fsyncFailLeader(ctx context.Context) fault {
	return nm.fsyncFail(ctx, "fsync-fail-leader", nm.leaderOrRandom(ctx))
}

func (nm *nemesis) fsyncFailFollower(ctx context.Context) fault {
	return nm.fsyncFail(ctx, "fsync-fail-follower", nm.follower(ctx))
}

func (nm *nemesis) fsyncFail(ctx context.Context, name string, i int) fault {
	f := fault{Name: name}
	if len(nm.db.lazy) != len(nm.db.nodes) {
		f.Detail = "the data dirs are not on lazyfs"
		return f
	}
	if !nm.db.expectExit(i, fsyncExit) {
		f.Detail = nm.db.nodes[i].Name + " does not run"
		return f
	}
	failed := nm.db.lazy[i].FailSync(".wal")
	through := nm.leaderOrRandom(ctx)
	burst := time.Duration(1000+nm.rng.Intn(1000)) * time.Millisecond
	done := make(chan int, 1)
	go func() { done <- nm.load(ctx, through, burst) }()
	var what string
	select {
	case sf := <-failed:
		what = fmt.Sprintf("the fsync of %s failed (%d dirty pages dropped)", sf.Name, sf.Dropped)
	case <-time.After(15 * time.Second):
		nm.db.lazy[i].DisarmSyncs()
		nm.db.expectExit(i, "")
		<-done
		f.Detail = nm.db.nodes[i].Name + ": no fsync of its log in 15 s"
		nm.recoverAll(ctx)
		return f
	}
	writes := <-done
	stopped := nm.waitFor(ctx, 30*time.Second, 100*time.Millisecond, func() bool { return !nm.db.running(i) })
	status := nm.db.status(i)
	// The power cut takes what the failed fsync covered (still in the
	// page cache until now).
	stats := nm.db.lazy[i].Cut(func() { nm.db.kill(i) })
	l := nm.otherThan(i)
	if ll, _ := nm.db.leader(ctx); ll >= 0 && ll != i {
		l = ll
	}
	removed := false
	if nm.memberFailed(ctx, l, i) {
		if ll, err := nm.removePeer(ctx, l, i); err == nil {
			removed = nm.peers(ctx, ll) == 2
		}
	}
	readded := removed && nm.readd(ctx, i, true)
	f.Effect = stopped && status == fsyncExit && removed && readded
	f.Detail = fmt.Sprintf("%s: %s in a %v burst (%d writes through %s); stopped by itself: %v (%s); power cut: %v; removed: %v, wiped and a voter again: %v",
		nm.db.nodes[i].Name, what, burst.Round(time.Millisecond), writes, nm.db.nodes[through].Name, stopped, status, stats, removed, readded)
	nm.recoverAll(ctx)
	return f
}
