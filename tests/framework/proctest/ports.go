//go:build linux

package proctest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"testing"
)

// FreePorts picks n distinct ports free on ip for TCP and UDP (gossip uses
// both). They are drawn below the kernel's ephemeral range: a port the
// kernel handed out as free (Listen on port 0) is one it may hand again to
// any process's outgoing connection before the test's process binds it,
// which on a machine busy with connections happened ("bind: address
// already in use" while the fault suite ran beside the tests). Another
// test picking the same port at the same moment stays possible, at about
// one chance in twenty thousand per port. Ask for every port of one ip in
// one call: separate calls may return the same port.
func FreePorts(t testing.TB, ip string, n int) []int {
	t.Helper()
	lo, hi := portsBelowEphemeral()
	var ports []int
	seen := map[int]bool{}
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000+n {
			t.Fatalf("no free ports on %s in [%d, %d)", ip, lo, hi)
		}
		port := lo + rand.IntN(hi-lo)
		if seen[port] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
		if err != nil {
			probe, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
			if err != nil {
				t.Fatalf("listen on %s: %v (is 127.0.0.0/8 routed to lo?)", ip, err)
			}
			probe.Close()
			continue
		}
		u, err := net.ListenPacket("udp", net.JoinHostPort(ip, strconv.Itoa(port)))
		l.Close()
		if err != nil {
			continue
		}
		u.Close()
		seen[port] = true
		ports = append(ports, port)
	}
	return ports
}

// portsBelowEphemeral is the range FreePorts draws from: from 10000 up to
// the start of net.ipv4.ip_local_port_range (32768 when it cannot be read).
func portsBelowEphemeral() (lo, hi int) {
	lo, hi = 10000, 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}
	var start, end int
	if _, err := fmt.Sscan(string(b), &start, &end); err == nil && start > lo+1000 {
		hi = start
	}
	return lo, hi
}
