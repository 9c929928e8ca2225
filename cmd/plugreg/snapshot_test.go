package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/internal/proctest"
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
	api := c.Servers[0].API
	for _, a := range []string{"a1", "a2", "a3"} {
		if _, err := api.Register(ctx, &client.PluginInfo{Type: "csi", Name: "ebs", AllocID: a, ConnectionInfo: &client.ConnectionInfo{SocketPath: "/run/ebs.sock"}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := api.Register(ctx, &client.PluginInfo{Type: "device", Name: "gpu", AllocID: "g1", ConnectionInfo: &client.ConnectionInfo{SocketPath: "/run/gpu.sock"}}); err != nil {
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

	// After the save: a deregistration and a new type.
	if _, err := api.Deregister(ctx, "csi", "ebs", "a2"); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Register(ctx, &client.PluginInfo{Type: "dra", Name: "x", AllocID: "1", ConnectionInfo: &client.ConnectionInfo{SocketPath: "/run/x.sock"}}); err != nil {
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
	if l, _, err := api.List(ctx, "dra", nil); err != nil || len(l) != 1 {
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
