package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/tests/framework/proctest"
	"github.com/plugreg/plugreg/tests/framework/testbackup"
)

// plugreg snapshot save, inspect and restore against three server
// processes: a restore undoes what happened after the save, and a
// truncated or foreign file is refused by inspect and restore alike,
// changing nothing.
func TestSnapshotCommands(t *testing.T) {
	bin := proctest.Build(t, "./cmd/plugreg")
	c := proctest.StartCluster(t, proctest.ClusterConfig{Bin: bin})
	c.WaitReady(t)
	dir := t.TempDir()
	cli := func(args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = []string{"PLUGREG_ADDR=" + c.Servers[1].HTTP}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reg := c.Servers[0].API
	for _, a := range []string{"a1", "a2", "a3"} {
		if _, err := reg.Register(ctx, &api.PluginInfo{Type: "csi", Name: "ebs", AllocID: a, ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/ebs.sock"}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := reg.Register(ctx, &api.PluginInfo{Type: "device", Name: "gpu", AllocID: "g1", ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/gpu.sock"}}); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "backup.snap")
	if out, err := cli("snapshot", "save", file); err != nil || !strings.Contains(out, "4 instances") {
		t.Fatalf("save: %v\n%s", err, out)
	}
	out, err := cli("snapshot", "inspect", file)
	if err != nil || !strings.Contains(out, "Instances:   4") || !regexpMatch(`(?m)^csi\s+1\s+3$`, out) || !regexpMatch(`(?m)^device\s+1\s+1$`, out) || !strings.Contains(out, "checked") {
		t.Fatalf("inspect: %v\n%s", err, out)
	}

	// Into a directory, as a schedule runs it: each save named by its
	// time and index, and -retain 2 keeps the newest two. Another file
	// of the directory is never touched.
	backups := t.TempDir()
	other := filepath.Join(backups, "notes.txt")
	os.WriteFile(other, []byte("mine\n"), 0o600)
	var saved []string
	for i := range 3 {
		if _, err := reg.Register(ctx, &api.PluginInfo{Type: "csi", Name: "rot", AllocID: fmt.Sprint(i), ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/r.sock"}}); err != nil {
			t.Fatal(err)
		}
		out, err := cli("snapshot", "save", "-retain", "2", backups)
		m := regexp.MustCompile(`to (\S+/plugreg-\d{8}T\d{6}Z-\d+\.snap)\n`).FindStringSubmatch(out)
		if err != nil || m == nil {
			t.Fatalf("save into a directory: %v\n%s", err, out)
		}
		saved = append(saved, m[1])
	}
	left, _ := filepath.Glob(filepath.Join(backups, "*"))
	want := []string{other, saved[1], saved[2]}
	sort.Strings(want) // as Glob's: -10 before -9 in the same second
	if !reflect.DeepEqual(left, want) {
		t.Fatalf("after three saves with -retain 2: %v, want %v", left, want)
	}
	if out, err := cli("snapshot", "inspect", saved[2]); err != nil || !strings.Contains(out, "Instances:   7") {
		t.Fatalf("inspect the newest: %v\n%s", err, out)
	}
	if out, err := cli("snapshot", "save", "-retain", "2", file); err == nil || !strings.Contains(out, "is not a directory") {
		t.Fatalf("-retain with a file: %v\n%s", err, out)
	}

	// After the save: a deregistration and a new type.
	if _, err := reg.Deregister(ctx, "csi", "ebs", "a2"); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Register(ctx, &api.PluginInfo{Type: "dra", Name: "x", AllocID: "1", ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/x.sock"}}); err != nil {
		t.Fatal(err)
	}

	// Damaged and foreign files change nothing.
	b, _ := os.ReadFile(file)
	truncated := filepath.Join(dir, "truncated.snap")
	os.WriteFile(truncated, b[:len(b)/2], 0o600)
	foreign := filepath.Join(dir, "foreign.snap")
	os.WriteFile(foreign, []byte("{\"not\": \"a snapshot\"}\n"), 0o600)
	for _, f := range []struct{ path, want string }{{truncated, "truncated"}, {foreign, "not a plugreg snapshot"}} {
		if out, err := cli("snapshot", "inspect", f.path); err == nil || !strings.Contains(out, f.want) {
			t.Fatalf("inspect %s: %v\n%s", f.path, err, out)
		}
		if out, err := cli("snapshot", "restore", f.path); err == nil || !strings.Contains(out, f.want) || !strings.Contains(out, "nothing was changed") {
			t.Fatalf("restore %s: %v\n%s", f.path, err, out)
		}
	}
	if l, _, err := reg.List(ctx, "dra", nil); err != nil || len(l) != 1 {
		t.Fatalf("after the refused restores: %v, %v", l, err)
	}

	if out, err := cli("snapshot", "restore", file); err != nil || !strings.Contains(out, "restored snapshot of index") {
		t.Fatalf("restore: %v\n%s", err, out)
	}
	// Every server has the backup's contents back.
	for _, s := range c.Servers {
		inst, _, err := s.API.Instances(ctx, "csi", "ebs", nil)
		if err != nil || len(inst) != 3 {
			t.Fatalf("%s: csi/ebs %v, %v; want the 3 of the backup", s.Name, inst, err)
		}
		if l, m, err := s.API.List(ctx, "dra", nil); err == nil && len(l) > 0 {
			t.Fatalf("%s: dra, made after the save, survived the restore: %v at %+v", s.Name, l, m)
		}
	}
}

func regexpMatch(re, s string) bool { return regexp.MustCompile(re).MatchString(s) }

// A restore of 100k instances through a follower while the leader is
// killed -9 (at a few moments): whichever way it went, once the leader is
// back every server holds the same registry, either the backup's or the
// one before, and takes writes.
func TestSnapshotRestoreLeaderKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("100k instances, processes")
	}
	bin := proctest.Build(t, "./cmd/plugreg")
	archive := filepath.Join(t.TempDir(), "100k.snap")
	writeBackup(t, archive, 100_000)
	for _, delay := range []time.Duration{200 * time.Millisecond, time.Second} {
		t.Run(delay.String(), func(t *testing.T) {
			c := proctest.StartCluster(t, proctest.ClusterConfig{Bin: bin})
			c.WaitReady(t)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			if _, err := c.Servers[0].API.Register(ctx, &api.PluginInfo{Type: "before", Name: "x", AllocID: "1", ConnectionInfo: &api.ConnectionInfo{SocketPath: "/s"}}); err != nil {
				t.Fatal(err)
			}
			leader, follower := leaderAndFollower(t, c)
			restore := exec.Command(bin, "snapshot", "restore", archive)
			restore.Env = []string{"PLUGREG_ADDR=" + follower.HTTP}
			var out strings.Builder
			restore.Stdout, restore.Stderr = &out, &out
			if err := restore.Start(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(delay)
			leader.Kill9(t)
			err := restore.Wait()
			t.Logf("restore with the leader killed -9 after %v: %v %s", delay, err, strings.TrimSpace(out.String()))
			leader.Start(t)
			var w api.WriteResult
			c.Poll(t, "a write after", func() (bool, string) {
				var err error
				w, err = follower.API.Register(ctx, &api.PluginInfo{Type: "after", Name: "y", AllocID: "1", ConnectionInfo: &api.ConnectionInfo{SocketPath: "/s"}})
				return err == nil, fmt.Sprint(err)
			})
			counts := map[string]string{}
			c.Poll(t, "every server at the same registry", func() (bool, string) {
				for _, s := range c.Servers {
					var n, before int
					for _, typ := range []string{"type0", "type1", "type2", "type3", "before", "after"} {
						l, m, err := s.API.List(ctx, typ, &client.QueryOptions{Stale: true})
						if err != nil && !strings.Contains(err.Error(), "not_found") {
							return false, s.Name + ": " + err.Error()
						}
						if m != nil && m.Index < w.Index {
							return false, fmt.Sprintf("%s at %d", s.Name, m.Index)
						}
						n += len(l)
						if typ == "before" {
							before = len(l)
						}
					}
					counts[s.Name] = fmt.Sprintf("%d names, before %d", n, before)
				}
				return counts["server-1"] == counts["server-2"] && counts["server-2"] == counts["server-3"], fmt.Sprint(counts)
			})
			switch counts["server-1"] {
			case "1001 names, before 0": // the backup's 1000 names, and "after"
				t.Log("the restore committed")
			case "2 names, before 1":
				if err == nil {
					t.Fatal("the restore was acknowledged but is not there")
				}
				t.Log("the restore did not commit")
			default:
				t.Fatalf("neither outcome: %v", counts)
			}
		})
	}
}

// writeBackup writes another cluster's backup of n instances (4 types,
// 1000 names) to path.
func writeBackup(t *testing.T, path string, n int) {
	t.Helper()
	if err := os.WriteFile(path, testbackup.Archive(t, testbackup.Registry(t, n)), 0o600); err != nil {
		t.Fatal(err)
	}
}

func leaderAndFollower(t *testing.T, c *proctest.Cluster) (leader, follower *proctest.Agent) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ms, err := c.Servers[0].API.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		for _, s := range c.Servers {
			if s.Name != m.Name {
				continue
			}
			if m.Leader {
				leader = s
			} else if follower == nil {
				follower = s
			}
		}
	}
	if leader == nil || follower == nil {
		t.Fatalf("members %+v: no leader or follower", ms)
	}
	return leader, follower
}
