package main

import (
	"fmt"
	"os/exec"
	"strings"
	"sync"
)

// The harness's own iptables chain (one per port base, so runs on other
// ports do not touch it), hooked into INPUT and OUTPUT. Every rule lives in
// it, so removing it removes every fault.

type netFaults struct {
	chain string
	mu    sync.Mutex // serialises iptables calls
	ips   []string
	ports string // the cluster's server and gossip ports: rules touch nothing else
	hooks bool
}

// protos is what each cut drops: Raft and RPC are TCP, gossip is TCP and UDP.
var protos = []string{"tcp", "udp"}

// rulesPerCut is how many rules one one-way cut adds.
const rulesPerCut = 2

func iptables(args ...string) error {
	out, err := exec.Command("iptables", append([]string{"-w"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("iptables %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// setup creates the chain (removing a stale one from a crashed run).
func (n *netFaults) setup() error {
	n.teardown()
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := iptables("-N", n.chain); err != nil {
		return err
	}
	for _, hook := range []string{"INPUT", "OUTPUT"} {
		if err := iptables("-I", hook, "-j", n.chain); err != nil {
			return err
		}
	}
	n.hooks = true
	return nil
}

// teardown removes the chain and its hooks. Safe to call any time.
func (n *netFaults) teardown() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, hook := range []string{"INPUT", "OUTPUT"} {
		for iptables("-D", hook, "-j", n.chain) == nil {
		}
	}
	iptables("-F", n.chain)
	iptables("-X", n.chain)
	n.hooks = false
}

// heal removes every rule.
func (n *netFaults) heal() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return iptables("-F", n.chain)
}

// cut drops traffic between a and b, both ways.
func (n *netFaults) cut(a, b string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range [][2]string{{a, b}, {b, a}} {
		for _, proto := range protos {
			if err := iptables("-A", n.chain, "-s", p[0], "-d", p[1], "-p", proto, "-m", "multiport", "--ports", n.ports, "-j", "DROP"); err != nil {
				return err
			}
		}
	}
	return nil
}

// isolate cuts node ip off from every other node.
func (n *netFaults) isolate(ip string) error { return n.isolateFrom(ip, n.ips) }

// isolateFrom cuts ip off from each of others (but itself): a client
// agent from every server.
func (n *netFaults) isolateFrom(ip string, others []string) error {
	for _, o := range others {
		if o != ip {
			if err := n.cut(ip, o); err != nil {
				return err
			}
		}
	}
	return nil
}

// loss drops a fraction p of the packets between nodes.
func (n *netFaults) loss(p float64) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, a := range n.ips {
		for _, b := range n.ips {
			if a == b {
				continue
			}
			for _, proto := range protos {
				if err := iptables("-A", n.chain, "-s", a, "-d", b, "-p", proto, "-m", "multiport", "--ports", n.ports,
					"-m", "statistic", "--mode", "random", "--probability", fmt.Sprintf("%.2f", p), "-j", "DROP"); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// rules counts the rules in the chain: the proof that a fault is in place.
func (n *netFaults) rules() int {
	out, err := exec.Command("iptables", "-w", "-S", n.chain).Output()
	if err != nil {
		return 0
	}
	return strings.Count(string(out), "-A "+n.chain)
}
