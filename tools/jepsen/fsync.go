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

// dataDirExit is the status of an agent whose log's fsync failed
// (cluster.StoreError, cmd/plugreg's exitDataErr).
const dataDirExit = "exit status 65"

func (nm *nemesis) fsyncFailLeader(ctx context.Context) fault {
	return nm.fsyncFail(ctx, "fsync-fail-leader", nm.leaderOrRandom(ctx))
}

func (nm *nemesis) fsyncFailFollower(ctx context.Context) fault {
	return nm.fsyncFail(ctx, "fsync-fail-follower", nm.follower(ctx))
}

func (nm *nemesis) fsyncFail(ctx context.Context, name string, i int) fault {
	// Once begun, it runs to the end, the end of the run notwithstanding:
	// a server whose fsync failed refuses its data dir until replaced.
	ctx = context.WithoutCancel(ctx)
	f := fault{Name: name}
	if len(nm.db.lazy) != len(nm.db.nodes) {
		f.Detail = "the data dirs are not on lazyfs"
		return f
	}
	if !nm.db.expectExit(i, dataDirExit) {
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
	removed, readded := nm.reseed(ctx, i)
	f.Effect = stopped && status == dataDirExit && removed && readded
	f.Detail = fmt.Sprintf("%s: %s in a %v burst (%d writes through %s); stopped by itself: %v (%s); power cut: %v; removed: %v, wiped and a voter again: %v",
		nm.db.nodes[i].Name, what, burst.Round(time.Millisecond), writes, nm.db.nodes[through].Name, stopped, status, stats, removed, readded)
	nm.recoverAll(ctx)
	return f
}

// The slow-disk family: a server's fsyncs take 1-3 s each, for 6 s,
// while a burst of writes goes through the leader and the network is
// fine. A slow leader holds every commit up (raft syncs its log before
// it counts its own vote); a slow follower falls behind and catches up.
// Nothing may be lost, no server may crash, and all must catch up.
func (nm *nemesis) slowDiskLeader(ctx context.Context) fault {
	return nm.slowDisk(ctx, "slow-disk-leader", nm.leaderOrRandom(ctx))
}

func (nm *nemesis) slowDiskFollower(ctx context.Context) fault {
	return nm.slowDisk(ctx, "slow-disk-follower", nm.follower(ctx))
}

func (nm *nemesis) slowDisk(ctx context.Context, name string, i int) fault {
	f := fault{Name: name}
	if len(nm.db.lazy) != len(nm.db.nodes) {
		f.Detail = "the data dirs are not on lazyfs"
		return f
	}
	delay := time.Duration(1000+nm.rng.Intn(2000)) * time.Millisecond
	before := nm.db.lazy[i].SlowSyncs(delay)
	through := nm.leaderOrRandom(ctx)
	writes := nm.load(ctx, through, 6*time.Second)
	slowed := nm.db.lazy[i].SlowSyncs(0) - before
	f.Effect = slowed > 0
	f.Detail = fmt.Sprintf("%s's fsyncs took %v each for 6 s (%d of them) while %d writes went through %s", nm.db.nodes[i].Name, delay.Round(time.Millisecond), slowed, writes, nm.db.nodes[through].Name)
	nm.recoverAll(ctx)
	return f
}

// reseed replaces server i, stopped on a data dir it must not run on, as
// docs/operations.md says: once gossip calls it failed, it is removed
// from the configuration through the leader, its data dir emptied, and
// it is started again; it reports whether it was removed and whether the
// leader made it a voter again.
func (nm *nemesis) reseed(ctx context.Context, i int) (removed, readded bool) {
	l := nm.otherThan(i)
	if ll, _ := nm.db.leader(ctx); ll >= 0 && ll != i {
		l = ll
	}
	if !nm.memberFailed(ctx, l, i) {
		return false, false
	}
	if ll, err := nm.removePeer(ctx, l, i); err == nil {
		removed = nm.peers(ctx, ll) == 2
	}
	return removed, removed && nm.readd(ctx, i, true)
}
