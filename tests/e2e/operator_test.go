package e2e

import (
	"errors"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/plugreg/plugreg/tests/framework/proctest"
)

// plugreg operator raft list-peers, transfer-leader and remove-peer, and
// operator reap resume, against three server processes: reap resume says
// nothing was paused; remove-peer and acl token delete of what does not
// exist exit 1 with the server's one-line refusal; leadership moves; a
// server killed -9 shows unhealthy (and list-peers exits 1); removed, it
// is gone from the configuration and the rest is healthy with no failure
// tolerance.
func TestOperatorRaftCommands(t *testing.T) {
	bin := proctest.Build(t, "./cmd/plugreg")
	// ACLs on (default allow: the commands need no token) for acl token
	// delete.
	c := proctest.StartCluster(t, proctest.ClusterConfig{Bin: bin, ServerArgs: []string{"-acl-enabled"}})
	c.WaitReady(t)
	cli := func(addr string, args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = []string{"PLUGREG_ADDR=" + addr}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	healthyRows := regexp.MustCompile(`(?m)^server-\d\s+\S+\s+(leader|follower)\s+true\s+true\s+alive\s`)
	var out string
	c.Poll(t, "three healthy servers", func() (bool, string) {
		var err error
		out, err = cli(c.Servers[0].HTTP, "operator", "raft", "list-peers")
		return err == nil && len(healthyRows.FindAllString(out, -1)) == 3 && strings.Contains(out, "failure tolerance: 1"), out
	})
	leader := regexp.MustCompile(`(?m)^(server-\d)\s+\S+\s+leader`).FindStringSubmatch(out)[1]

	// Nothing held: reap resume finds the leader, says so and changes
	// nothing.
	if out, err := cli(c.Servers[0].HTTP, "operator", "reap", "resume"); err != nil || !strings.Contains(out, "reaping was not paused on server-") {
		t.Fatalf("reap resume: %v\n%s", err, out)
	}

	// What does not exist is refused by the server: exit 1, its message
	// on one line, nothing removed.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"operator", "raft", "remove-peer", "nosuch"}, `plugreg operator raft remove-peer: id "nosuch" was not found in the Raft configuration (404 not_found)` + "\n"},
		{[]string{"acl", "token", "delete", "nosuch"}, `plugreg acl token delete: Cannot find token "nosuch" (404 not_found)` + "\n"},
	} {
		out, err := cli(c.Servers[0].HTTP, tc.args...)
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 || out != tc.want {
			t.Fatalf("plugreg %s: %v\n%s\nwant exit status 1 and %q", strings.Join(tc.args, " "), err, out, tc.want)
		}
	}

	out, err := cli(c.Servers[1].HTTP, "operator", "raft", "transfer-leader")
	if err != nil || !strings.Contains(out, "leadership moved from "+leader) {
		t.Fatalf("transfer-leader: %v\n%s", err, out)
	}
	c.Poll(t, "another leader", func() (bool, string) {
		out, _ := cli(c.Servers[0].HTTP, "operator", "raft", "list-peers")
		m := regexp.MustCompile(`(?m)^(server-\d)\s+\S+\s+leader`).FindStringSubmatch(out)
		return m != nil && m[1] != leader, out
	})

	// A follower killed -9: unhealthy, and list-peers says so with exit 1.
	var victim *proctest.Agent
	out, _ = cli(c.Servers[0].HTTP, "operator", "raft", "list-peers")
	for _, s := range c.Servers {
		if regexp.MustCompile(`(?m)^` + s.Name + `\s+\S+\s+follower`).MatchString(out) {
			victim = s
			break
		}
	}
	if victim == nil {
		t.Fatal("no follower found")
	}
	// While it runs, gossip has it alive and removing it is refused:
	// the leader would add it back.
	if out, err := cli(c.Servers[0].HTTP, "operator", "raft", "remove-peer", victim.Name); err == nil || !strings.Contains(out, "alive in gossip") {
		t.Fatalf("remove-peer of a running server: %v\n%s", err, out)
	}
	victim.Kill9(t)
	other := c.Servers[0]
	if other == victim {
		other = c.Servers[1]
	}
	c.Poll(t, victim.Name+" unhealthy", func() (bool, string) {
		out, err := cli(other.HTTP, "operator", "raft", "list-peers")
		return err != nil && regexp.MustCompile(`(?m)^`+victim.Name+`\s+\S+\s+follower\s+true\s+false`).MatchString(out) &&
			strings.Contains(out, "failure tolerance: 0"), out
	})
	c.Poll(t, victim.Name+" failed in gossip", func() (bool, string) {
		out, err := cli(other.HTTP, "operator", "raft", "list-peers")
		return err != nil && regexp.MustCompile(`(?m)^`+victim.Name+`\s+\S+\s+follower\s+true\s+false\s+failed`).MatchString(out), out
	})
	if out, err := cli(other.HTTP, "operator", "raft", "remove-peer", victim.Name); err != nil || !strings.Contains(out, "removed "+victim.Name) {
		t.Fatalf("remove-peer: %v\n%s", err, out)
	}
	c.Poll(t, "two healthy servers", func() (bool, string) {
		out, err := cli(other.HTTP, "operator", "raft", "list-peers")
		return err == nil && len(healthyRows.FindAllString(out, -1)) == 2 && !strings.Contains(out, victim.Name), out
	})
}
