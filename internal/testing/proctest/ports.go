//go:build linux

package proctest

import (
	"net"
	"strconv"
	"testing"
)

// FreePorts picks n distinct ports free on ip for TCP and UDP (gossip uses
// both). Another process may take one before the test's process binds it;
// the ephemeral range makes that unlikely. Ask for every port of one ip
// in one call: separate calls may return the same port.
func FreePorts(t testing.TB, ip string, n int) []int {
	t.Helper()
	var ports []int
	seen := map[int]bool{}
	for tries := 0; len(ports) < n; tries++ {
		if tries > 100+n {
			t.Fatalf("no free ports on %s", ip)
		}
		l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			t.Fatalf("listen on %s: %v (is 127.0.0.0/8 routed to lo?)", ip, err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", net.JoinHostPort(ip, strconv.Itoa(port)))
		l.Close()
		if err != nil {
			continue
		}
		u.Close()
		if !seen[port] {
			seen[port] = true
			ports = append(ports, port)
		}
	}
	return ports
}
