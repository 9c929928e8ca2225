package testcluster

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// Partition cuts every node in isolated off from every other node (both
// directions, TCP and UDP) with iptables rules on lo, in a chain of this
// cluster's own. Heal or the test's cleanup removes them. The test is
// skipped only where iptables cannot run at all (not root, or not
// installed); CI installs it.
func (c *Cluster) Partition(isolated ...int) {
	c.t.Helper()
	chain := c.chain()
	if err := iptables("-N", chain); err != nil {
		if !c.haveChain(chain) {
			c.t.Skipf("iptables unavailable: %v", err)
		}
	} else {
		c.t.Cleanup(func() { c.removeChain(chain) })
		for _, hook := range []string{"INPUT", "OUTPUT"} {
			if err := iptables("-I", hook, "-j", chain); err != nil {
				c.t.Fatalf("iptables hook %s: %v", hook, err)
			}
		}
	}
	in := map[int]bool{}
	for _, i := range isolated {
		in[i] = true
	}
	for i, a := range c.Nodes {
		for j, b := range c.Nodes {
			if i != j && in[i] && !in[j] {
				for _, dir := range [][2]string{{a.IP, b.IP}, {b.IP, a.IP}} {
					if err := iptables("-A", chain, "-s", dir[0], "-d", dir[1], "-j", "DROP"); err != nil {
						c.t.Fatalf("iptables drop %s->%s: %v", dir[0], dir[1], err)
					}
				}
			}
		}
	}
}

// Heal removes every partition rule.
func (c *Cluster) Heal() {
	c.t.Helper()
	if c.haveChain(c.chain()) {
		if err := iptables("-F", c.chain()); err != nil {
			c.t.Fatalf("iptables flush: %v", err)
		}
	}
}

func (c *Cluster) chain() string {
	// iptables chain names are at most 28 characters.
	ip := strings.ReplaceAll(strings.TrimPrefix(c.Nodes[0].IP, "127."), ".", "-")
	return fmt.Sprintf("PLUGREG-T-%d-%s", os.Getpid()%100000, ip)
}

func (c *Cluster) haveChain(chain string) bool { return iptables("-L", chain, "-n") == nil }

func (c *Cluster) removeChain(chain string) {
	for _, hook := range []string{"INPUT", "OUTPUT"} {
		for iptables("-D", hook, "-j", chain) == nil {
		}
	}
	iptables("-F", chain)
	iptables("-X", chain)
}

func iptables(args ...string) error {
	out, err := exec.Command("iptables", append([]string{"-w"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("iptables %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}
