package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"time"

	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/internal/atomicfile"
	"github.com/plugreg/plugreg/snapshot"
)

func runSnapshotSave(args []string) error {
	cf := newClientFlags("snapshot save", "FILE|DIR", "Saves a point-in-time backup of the registry to FILE (a gzipped tar: meta.json,\nstate.bin, SHA256SUMS). Taken after a linearizable read barrier unless -stale.\nGiven a directory, names the file plugreg-TIME-INDEX.snap in it (TIME in UTC,\nsortable), and with -retain N then removes all but the newest N such files: for\nscheduled backups (the Helm chart's snapshot CronJob), where nothing else names them.\nNeeds an operator token when ACLs are on; the file holds ACL token hashes: keep it 0600.")
	stale := cf.fs.Bool("stale", false, "take the answering server's state without a read barrier (works without a leader)")
	retain := cf.fs.Int("retain", 0, "with a directory: keep the newest N plugreg-*.snap files there once this one is saved (0: keep all)")
	*cf.timeout = 5 * time.Minute
	return cf.withClient(args, []int{1}, func(ctx context.Context, c *client.Client) error {
		path := cf.args[0]
		dir := ""
		if st, err := os.Stat(path); err == nil && st.IsDir() {
			dir = path
		}
		switch {
		case *retain < 0:
			return usageErrorf(cf.fs, "-retain %d: want 0 (keep all) or more", *retain)
		case *retain > 0 && dir == "":
			return usageErrorf(cf.fs, "-retain prunes a directory of snapshots: %s is not a directory", path)
		}
		var buf bytes.Buffer
		if err := c.SnapshotSave(ctx, &buf, &client.QueryOptions{Stale: *stale}); err != nil {
			return err
		}
		// Checked before it is kept: a backup that cannot be restored
		// is worse than none.
		meta, state, err := snapshot.Decode(bytes.NewReader(buf.Bytes()))
		if err != nil {
			return fmt.Errorf("the agent sent an archive that does not check: %w", err)
		}
		if dir != "" {
			path = filepath.Join(dir, fmt.Sprintf(snapshotNameFormat, meta.Created.UTC().Format(snapshotTimeLayout), meta.Index))
		}
		// Whole or not at all: an interrupted save leaves no half file.
		if err := atomicfile.WriteFile(path, buf.Bytes(), 0o600); err != nil {
			return fmt.Errorf("save snapshot: %w", err)
		}
		fmt.Printf("saved snapshot of index %d (%d instances, %d bytes) to %s\n", meta.Index, state.Len(), buf.Len(), path)
		if *retain > 0 {
			return pruneSnapshots(dir, *retain)
		}
		return nil
	})
}

// The names snapshot save gives in a directory: plugreg-TIME-INDEX.snap.
// -retain removes only files named so (snapshotName reads the format).
const (
	snapshotNameFormat = "plugreg-%s-%d.snap"
	snapshotTimeLayout = "20060102T150405Z"
)

var snapshotName = regexp.MustCompile(`^plugreg-(\d{8}T\d{6}Z)-(\d+)\.snap$`)

// pruneSnapshots removes all but the newest keep snapshots of dir, by the
// time and index their names give. A file that fails to go is reported;
// the save itself stands.
func pruneSnapshots(dir string, keep int) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	type snap struct {
		name, taken string
		index       uint64
	}
	var snaps []snap
	for _, e := range entries {
		m := snapshotName.FindStringSubmatch(e.Name())
		if m == nil || !e.Type().IsRegular() {
			continue
		}
		idx, err := strconv.ParseUint(m[2], 10, 64)
		if err != nil {
			continue
		}
		snaps = append(snaps, snap{e.Name(), m[1], idx})
	}
	sort.Slice(snaps, func(i, j int) bool {
		if snaps[i].taken != snaps[j].taken {
			return snaps[i].taken < snaps[j].taken
		}
		return snaps[i].index < snaps[j].index
	})
	var errs []error
	for _, sn := range snaps[:max(0, len(snaps)-keep)] {
		n := filepath.Join(dir, sn.name)
		if err := os.Remove(n); err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Printf("removed %s (-retain %d)\n", n, keep)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("saved, but pruning the older snapshots failed: %w", err)
	}
	return nil
}

func runSnapshotRestore(args []string) error {
	cf := newClientFlags("snapshot restore", "FILE", "Replaces the whole registry (plugins, ACL tokens) with the backup in FILE, through\nthe leader: every server applies it at one index; event subscribers get one reset.\nThe file is checked whole first: a damaged, foreign or newer one changes nothing.")
	*cf.timeout = 5 * time.Minute
	return cf.withClient(args, []int{1}, func(ctx context.Context, c *client.Client) error {
		b, err := os.ReadFile(cf.args[0])
		if err != nil {
			return fmt.Errorf("restore: %w", err)
		}
		meta, state, err := snapshot.Decode(bytes.NewReader(b))
		if err != nil {
			return fmt.Errorf("%s: %w; nothing was changed", cf.args[0], err)
		}
		res, err := c.SnapshotRestore(ctx, bytes.NewReader(b))
		if err != nil {
			return err
		}
		fmt.Printf("restored snapshot of index %d (%d instances, taken by %s at %s) at index %d\n",
			meta.Index, state.Len(), meta.NodeID, meta.Created.Format(time.RFC3339), res.Index)
		return nil
	})
}

func runSnapshotInspect(args []string) error {
	cf := newClientFlags("snapshot inspect", "FILE", "Checks a backup and shows what it holds: index, term, configuration, counts per type, size, checksum.")
	if err := cf.parse(args, 1); err != nil {
		return err
	}
	b, err := os.ReadFile(cf.args[0])
	if err != nil {
		return fmt.Errorf("inspect: %w", err)
	}
	meta, state, err := snapshot.Decode(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("%s: %w", cf.args[0], err)
	}
	sum := snapshot.Summarize(meta, state)
	if cf.out.structured() {
		return cf.out.print(struct {
			snapshot.Summary
			FileSize int
		}{sum, len(b)}, nil)
	}
	fmt.Printf("Index:       %d\nTerm:        %d\nTaken by:    %s at %s\nFormat:      %s v%d\n", meta.Index, meta.Term, meta.NodeID, meta.Created.Format(time.RFC3339), meta.Format, meta.Version)
	fmt.Printf("File size:   %d bytes\nState size:  %d bytes\nSHA-256:     %s (state.bin; checked)\n", len(b), meta.StateSize, meta.StateSHA256)
	fmt.Printf("Instances:   %d\nACL tokens:  %d\n\n", sum.Instances, sum.ACLTokens)
	servers := table{header: "SERVER\tADDRESS\tVOTER"}
	for _, s := range meta.Servers {
		servers.rows = append(servers.rows, []string{s.ID, s.Address, strconv.FormatBool(s.Voter)})
	}
	if err := cf.out.print(nil, func() table { return servers }); err != nil {
		return err
	}
	fmt.Println()
	types := make([]string, 0, len(sum.Types))
	for t := range sum.Types {
		types = append(types, t)
	}
	sort.Strings(types)
	counts := table{header: "TYPE\tNAMES\tINSTANCES"}
	for _, t := range types {
		counts.rows = append(counts.rows, []string{t, strconv.Itoa(sum.Types[t].Names), strconv.Itoa(sum.Types[t].Instances)})
	}
	return cf.out.print(nil, func() table { return counts })
}
