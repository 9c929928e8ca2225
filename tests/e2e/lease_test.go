package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/tests/framework/proctest"
)

// plugreg register -ttl -renew holds a lease in the foreground: the
// instance outlives its TTL several times, a lease lost (here: someone
// deregistered it) is registered again, and Ctrl-C deregisters it.
// plugreg renew renews once, and says when there is no such lease; -renew
// without a TTL is a usage error.
func TestRegisterRenewHoldsALease(t *testing.T) {
	bin := proctest.Build(t, "./cmd/plugreg")
	c := proctest.StartCluster(t, proctest.ClusterConfig{Bin: bin})
	c.WaitReady(t)
	var addrs []string
	for _, s := range c.Servers {
		addrs = append(addrs, s.HTTP)
	}
	env := []string{"PLUGREG_ADDR=" + strings.Join(addrs, ",")}
	cli := func(args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	reg := []string{"register", "-type", "csi", "-name", "ebs", "-alloc", "a1", "-socket", "/run/ebs.sock", "-ttl", "2s"}

	if out, err := cli(append(slices.Clone(reg[:len(reg)-2]), "-renew")...); err == nil || !strings.Contains(out, "-renew keeps a lease: give it a -ttl") {
		t.Fatalf("-renew without -ttl: %v\n%s", err, out)
	}

	hold := exec.Command(bin, append(reg, "-renew")...)
	hold.Env = env
	var out bytes.Buffer // read once the process has exited
	hold.Stdout, hold.Stderr = &out, &out
	if err := hold.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- hold.Wait() }()
	t.Cleanup(func() {
		hold.Process.Kill()
		<-exited
	})
	registered := func() (bool, string) {
		out, err := cli("get", "csi", "ebs", "a1", "-json")
		return err == nil && strings.Contains(out, `"TTL": "2s"`), out
	}
	c.Poll(t, "the leased registration", func() (bool, string) {
		ok, got := registered()
		return ok, got + "\n(the holder: see its output below if it exited)"
	})
	time.Sleep(6 * time.Second) // three TTLs
	if ok, got := registered(); !ok {
		t.Fatalf("the held lease did not outlive three TTLs:\n%s", got)
	}
	if got, err := cli("renew", "csi", "ebs", "a1"); err != nil || !strings.Contains(got, "renewed csi/ebs/a1: its lease runs 2s from now") {
		t.Fatalf("renew: %v\n%s", err, got)
	}
	if got, err := cli("renew", "csi", "ebs", "nope"); err == nil || !strings.Contains(got, "not_found") {
		t.Fatalf("renew of no lease: %v\n%s", err, got)
	}

	if got, err := cli("deregister", "csi", "ebs", "a1"); err != nil {
		t.Fatalf("deregister under the holder: %v\n%s", err, got)
	}
	c.Poll(t, "the holder to register it again", registered)

	hold.Process.Signal(os.Interrupt)
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		if err != nil {
			t.Fatalf("the holder exited with %v:\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the holder did not stop on SIGINT")
	}
	for _, want := range []string{"renewing the lease of csi/ebs/a1 every 667ms until Ctrl-C", "was lost", "registering it again", "deregistered csi/ebs/a1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the holder's output lacks %q:\n%s", want, out.String())
		}
	}
	if got, err := cli("get", "csi", "ebs", "a1"); err == nil || !strings.Contains(got, "not_found") {
		t.Fatalf("after Ctrl-C: %v\n%s", err, got)
	}
}
