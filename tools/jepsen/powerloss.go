package main

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/plugreg/plugreg/tests/framework/lazyfs"
)

// lazyCapacity is each server's lazyfs, as the disk family's tmpfs
// (dataDirSize): the disk family fills it when both run.
const lazyCapacity = 128 << 20

// lazyFamilies are the families whose faults need each server's data dir
// on a lazyfs of its own.
var lazyFamilies = map[string]bool{"powerloss": true, "fsync": true, "slow-disk": true}

// setupPowerloss puts each server's data dir on a lazyfs of its own when
// a family of lazyFamilies runs. With -nemesis all, a machine that cannot
// mount FUSE directly (no /dev/fuse, not root) leaves the family out with
// a line in run.log, as the disk family does without a tmpfs; asked for
// by name, it is an error. Over the disk family's tmpfs when both run: the
// lazyfs hides it, and the disk family fills the lazyfs instead.
func setupPowerloss(d *db, r *runConfig, logf func(string, ...interface{})) error {
	if !slices.ContainsFunc(r.nemesis, func(f string) bool { return lazyFamilies[f] }) {
		return nil
	}
	var names lazyfs.Names
	switch r.powerlossNames {
	case "journal":
		names = lazyfs.Journal
	case "posix":
		names = lazyfs.POSIX
	default:
		return fmt.Errorf("-powerloss-names %q: want journal or posix", r.powerlossNames)
	}
	err := d.mountLazyFS(names)
	if err == nil {
		logf("powerloss: each server's data dir on a lazyfs of its own (%d MiB, %v names); a cut loses what was not fsynced", lazyCapacity>>20, names)
		return nil
	}
	if !r.nemesisAll {
		return fmt.Errorf("the powerloss, fsync and slow-disk families need a lazyfs (FUSE) per server data dir: %w", err)
	}
	logf("leaving the powerloss, fsync and slow-disk families out: they need a lazyfs (FUSE) per server data dir: %v", err)
	r.nemesis = slices.DeleteFunc(r.nemesis, func(f string) bool { return lazyFamilies[f] })
	return nil
}

// mountLazyFS mounts a lazyfs on each server's data dir. Client agents
// keep theirs: they hold no Raft state.
func (d *db) mountLazyFS(names lazyfs.Names) error {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return err
	}
	for _, n := range d.nodes {
		if err := os.MkdirAll(n.Dir, 0o755); err != nil {
			d.unmountLazyFS()
			return err
		}
		m, err := lazyfs.New(n.Dir, lazyfs.Config{Capacity: lazyCapacity, Names: names})
		if err != nil {
			d.unmountLazyFS()
			return fmt.Errorf("%s: %w", n.Name, err)
		}
		d.lazy = append(d.lazy, m)
	}
	return nil
}

// unmountLazyFS undoes mountLazyFS; call it once the agents are gone (a
// mount still in use is detached and its connection aborted). Safe to
// call any time.
func (d *db) unmountLazyFS() {
	for _, m := range d.lazy {
		if err := m.Unmount(); err != nil {
			d.logf("%v", err)
		}
	}
	d.lazy = nil
}

// powerLossActions are the powerloss family's faults: the leader, a
// follower, two of three (a majority) or all three lose power at once.
func (nm *nemesis) powerLossActions() []func(context.Context) fault {
	return []func(context.Context) fault{nm.powerLossLeader, nm.powerLossFollower, nm.powerLossMajority, nm.powerLossAll, nm.powerLossInSync}
}

func (nm *nemesis) powerLossLeader(ctx context.Context) fault {
	return nm.powerLoss(ctx, "powerloss-leader", []int{nm.leaderOrRandom(ctx)}, false)
}

func (nm *nemesis) powerLossFollower(ctx context.Context) fault {
	return nm.powerLoss(ctx, "powerloss-follower", []int{nm.follower(ctx)}, false)
}

// powerLossInSync cuts the leader's power, or a follower's, inside an
// fsync of its log (lazyfs.FreezeAtSync), and the cut keeps a subset or a
// prefix of the pages that fsync was writing: a log whose last batch is
// torn, which raft-wal's recovery of a segment's tail must drop. A cut at
// a random moment rarely gets there: raft-wal fsyncs each batch at once.
func (nm *nemesis) powerLossInSync(ctx context.Context) fault {
	i := nm.leaderOrRandom(ctx)
	if nm.rng.Intn(2) == 0 {
		i = nm.otherThan(i)
	}
	return nm.powerLoss(ctx, "powerloss-in-fsync", []int{i}, true)
}

// powerLossMajority cuts two of the three: an entry acknowledged to a
// client is then on one durable log at least only if the two fsynced it.
func (nm *nemesis) powerLossMajority(ctx context.Context) fault {
	keep := nm.rng.Intn(len(nm.db.nodes))
	var idx []int
	for i := range nm.db.nodes {
		if i != keep {
			idx = append(idx, i)
		}
	}
	return nm.powerLoss(ctx, "powerloss-majority", idx, false)
}

func (nm *nemesis) powerLossAll(ctx context.Context) fault {
	return nm.powerLoss(ctx, "powerloss-all", []int{0, 1, 2}, false)
}

// keep picks what a power cut lets reach the disks of the pages written
// since their last fsync: nothing (a third of the cuts), a random subset,
// or a prefix, with one page torn in half of the latter. raft-wal's
// recovery of a segment's torn tail runs only after the latter two.
func (nm *nemesis) keep() lazyfs.Keep {
	return lazyfs.Keep{Mode: lazyfs.KeepMode(nm.rng.Intn(3)), Tear: nm.rng.Intn(2) == 0}
}

// powerLoss cuts the power of servers idx at one instant, at a random
// moment of a burst of writes through the leader: every lazyfs is frozen
// first (from then on nothing reaches any of the disks), then the agents
// are SIGKILLed, then each disk is left with what was fsynced. The agents
// are restarted after 0-2 s, as a machine that boots again, and must come
// back: one that cannot start is a crash, one that does not catch up a
// catch-up violation.
func (nm *nemesis) powerLoss(ctx context.Context, name string, idx []int, inSync bool) fault {
	f := fault{Name: name}
	if len(nm.db.lazy) != len(nm.db.nodes) {
		f.Detail = "the data dirs are not on lazyfs"
		return f
	}
	l, term := nm.db.leader(ctx)
	through := l
	if through < 0 {
		through = nm.rng.Intn(len(nm.db.nodes))
	}
	burst := time.Duration(1000+nm.rng.Intn(1000)) * time.Millisecond
	at := time.Duration(nm.rng.Int63n(int64(burst)))
	keep := nm.keep()
	var frozeAt <-chan lazyfs.SyncFailure
	if inSync {
		log := ".wal"
		if nm.db.logStore == "boltdb" {
			log = "raft.db"
		}
		// Its fsync then fails (EIO) until the cut: the agent may exit
		// 65 on it first (a failed fsync), or be killed by the cut.
		nm.db.expectExit(idx[0], dataDirExit)
		frozeAt = nm.db.lazy[idx[0]].FreezeAtSync(log)
		// Some of the fsync's pages, never none.
		keep.Mode = []lazyfs.KeepMode{lazyfs.KeepSubset, lazyfs.KeepPrefix}[nm.rng.Intn(2)]
	}
	done := make(chan int, 1)
	start := time.Now()
	go func() { done <- nm.load(ctx, through, burst) }()
	if inSync {
		select {
		case sf := <-frozeAt:
			f.Detail = fmt.Sprintf("inside an fsync of %s: ", sf.Name)
		case <-time.After(10 * time.Second):
			nm.db.lazy[idx[0]].DisarmSyncs()
			f.Detail = "no fsync of the log in 10 s, so at that moment: "
		}
		at = time.Since(start)
	} else {
		nm.sleep(ctx, at)
	}

	olds := make([]int, len(idx))
	for k, i := range idx {
		olds[k] = nm.db.pid(i)
	}
	stats := make([]lazyfs.CutStats, len(idx))
	killErrs := make([]error, len(idx))
	rngs := make([]*rand.Rand, len(idx))
	for k := range idx {
		rngs[k] = rand.New(rand.NewSource(nm.rng.Int63()))
	}
	var frozen, cut sync.WaitGroup
	frozen.Add(len(idx))
	for k, i := range idx {
		cut.Add(1)
		go func() {
			defer cut.Done()
			stats[k] = nm.db.lazy[i].CutKeeping(func() {
				// Every disk frozen before any agent dies: one instant
				// for all of them, as one power supply.
				frozen.Done()
				frozen.Wait()
				killErrs[k] = nm.db.kill(i)
			}, keep, rngs[k])
		}()
	}
	cut.Wait()
	writes := <-done

	delay := time.Duration(nm.rng.Int63n(int64(2*time.Second) + 1))
	nm.sleep(ctx, delay)
	f.Effect = true
	var parts []string
	for k, i := range idx {
		gone := killErrs[k] == nil && olds[k] != 0 && !nm.db.running(i)
		err := nm.db.start(i)
		back := err == nil && nm.db.pid(i) != 0
		f.Effect = f.Effect && gone && back
		role := "follower"
		if i == l {
			role = fmt.Sprintf("leader in term %d", term)
		}
		part := fmt.Sprintf("%s (%s): %v; killed: %v, restarted: %v", nm.db.nodes[i].Name, role, stats[k], gone, back)
		if killErrs[k] != nil {
			part += "; " + killErrs[k].Error()
		}
		if err != nil {
			part += "; " + err.Error()
		}
		parts = append(parts, part)
	}
	// Up again: every restarted agent answers. One that exits instead
	// (its data dir unreadable, say) is the process watch's to report.
	up := nm.waitFor(ctx, 30*time.Second, 200*time.Millisecond, func() bool {
		for _, i := range idx {
			if _, err := nm.db.health(ctx, i); err != nil {
				return false
			}
		}
		return true
	})
	f.Detail += fmt.Sprintf("power cut %v into a %v burst (%d writes through %s), unsynced pages kept: %v, restarted after %v: %s; all answering: %v",
		at.Round(time.Millisecond), burst.Round(time.Millisecond), writes, nm.db.nodes[through].Name, keep, delay.Round(time.Millisecond), strings.Join(parts, "; "), up)
	nm.recoverAll(ctx)
	return f
}
