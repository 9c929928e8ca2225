package main

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// The rollback family: a follower's data dir is put back to a copy taken
// earlier (a VM snapshot, a backup of the disk restored), at the worst
// moment. While the other follower is cut off, the leader commits writes
// with the follower alone; then the follower is stopped and its data dir
// restored from the copy, which lacks those writes; then the leader is
// cut off and the other follower rejoins. Had the restored follower
// started, it and the other follower (which lacks the writes too) would
// elect a leader without them: acknowledged writes lost. It must refuse
// to start (status 65, "the data dir went back": cluster's rollback
// check), which leaves no quorum until the leader is back. Then it is
// replaced as docs/operations.md says: removed, emptied, added again.
func (nm *nemesis) rollback(ctx context.Context) fault {
	// Once begun, it runs to the end, the end of the run notwithstanding:
	// a data dir left restored would refuse every start after it.
	ctx = context.WithoutCancel(ctx)
	f, l, _, ok := nm.withLeader(ctx, "rollback")
	if !ok {
		return f
	}
	i := nm.otherThan(l)
	o := slices.IndexFunc(nm.db.nodes, func(n *node) bool { return n != nm.db.nodes[l] && n != nm.db.nodes[i] }) // the other follower
	copyDir := filepath.Join(nm.db.root, nm.db.nodes[i].Name+"-copy")
	os.RemoveAll(copyDir)
	defer os.RemoveAll(copyDir)
	nm.db.kill(i)
	if err := copyDataDir(nm.db.nodes[i].Dir, copyDir); err != nil {
		f.Detail = "copy the data dir: " + err.Error()
		nm.recoverAll(ctx)
		return f
	}
	nm.db.start(i)
	caughtUp := nm.waitFor(ctx, 30*time.Second, 200*time.Millisecond, func() bool {
		h, err := nm.db.health(ctx, i)
		return err == nil && h.Leader != ""
	})

	// Writes that only the leader and the follower hold.
	nm.net.isolate(nm.db.nodes[o].IP)
	burst := time.Duration(1000+nm.rng.Intn(1000)) * time.Millisecond
	writes := nm.load(ctx, l, burst)
	// The follower reports how far it applied every second
	// (cluster.ackReportInterval).
	nm.sleep(ctx, 2500*time.Millisecond)

	nm.db.kill(i)
	restored := nm.db.wipe(i) == nil && copyDataDir(copyDir, nm.db.nodes[i].Dir) == nil
	nm.db.expectNextExit(i, dataDirExit)
	nm.db.start(i)
	refused := nm.waitFor(ctx, 20*time.Second, 100*time.Millisecond, func() bool { return !nm.db.running(i) })
	status := nm.db.status(i)

	// The leader away, the other follower back: no quorum without the
	// restored follower.
	nm.net.heal()
	nm.net.isolate(nm.db.nodes[l].IP)
	nm.sleep(ctx, nm.duration())
	nm.net.heal()
	if _, err := nm.db.waitLeader(ctx, 30*time.Second); err != nil {
		f.Detail = fmt.Sprintf("%s: no leader once the network healed: %v", nm.db.nodes[i].Name, err)
	}

	removed, readded := nm.reseed(ctx, i)
	f.Effect = caughtUp && restored && refused && status == dataDirExit && removed && readded
	f.Detail += fmt.Sprintf("%s's data dir put back past %d writes through %s with %s cut off; refused to start: %v (%s); %s then cut off; removed: %v, emptied and a voter again: %v",
		nm.db.nodes[i].Name, writes, nm.db.nodes[l].Name, nm.db.nodes[o].Name, refused, status, nm.db.nodes[l].Name, removed, readded)
	nm.recoverAll(ctx)
	return f
}

// copyDataDir copies the regular files and dirs under from to to (made):
// a stopped agent's data dir, without its socket.
func copyDataDir(from, to string) error {
	return filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, path)
		if err != nil {
			return err
		}
		dst := filepath.Join(to, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(dst, 0o700)
		case !d.Type().IsRegular():
			return nil
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}
