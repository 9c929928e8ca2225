package gossip

import (
	"context"
	"fmt"
	"log"
	"net"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
)

// boundTransport is memberlist's NetTransport with its outgoing TCP
// connections (push-pull, the fallback probe, joins) bound to the agent's
// -bind address, as its UDP already is. memberlist's own dials leave the
// source to the kernel: on a host with several addresses (and on
// loopback, where the fault suite runs one agent per 127.0.0.x) they come
// from another address than the one the agent gossips as, so a firewall
// rule for that address does not apply to them, and the fault suite's
// partitions cut gossip's UDP but not its TCP (its client-agent runs
// showed "able to connect over TCP but UDP probes failed").
type boundTransport struct {
	*memberlist.NetTransport
	local *net.TCPAddr
	// dials ends every dial in flight and refuses new ones: Shutdown must
	// not wait out a dial (10 s on a LAN) to a member that is gone.
	dials      context.Context
	cancelDial context.CancelFunc
}

// stopDialing ends the dials in flight; memberlist's own Shutdown follows.
func (t *boundTransport) stopDialing() { t.cancelDial() }

func newBoundTransport(bindAddr string, port int, logger *log.Logger) (*boundTransport, error) {
	ip := net.ParseIP(bindAddr)
	if ip == nil {
		return nil, fmt.Errorf("bind address %q is not an IP", bindAddr)
	}
	conf := &memberlist.NetTransportConfig{BindAddrs: []string{bindAddr}, BindPort: port, Logger: logger}
	// A free port is picked for TCP, then bound for UDP too: another
	// process can take it between the two (memberlist retries the same
	// way).
	tries := 1
	if port == 0 {
		tries = 10
	}
	var err error
	for i := 0; i < tries; i++ {
		var nt *memberlist.NetTransport
		if nt, err = memberlist.NewNetTransport(conf); err == nil {
			t := &boundTransport{NetTransport: nt}
			t.dials, t.cancelDial = context.WithCancel(context.Background())
			if !ip.IsUnspecified() {
				t.local = &net.TCPAddr{IP: ip}
			}
			return t, nil
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, err
}

// DialTimeout is memberlist.Transport's, from the bound address.
func (t *boundTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout is memberlist.NodeAwareTransport's, from the bound
// address.
func (t *boundTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	if t.local != nil {
		d.LocalAddr = t.local
	}
	return d.DialContext(t.dials, "tcp", a.Addr)
}

var _ memberlist.NodeAwareTransport = (*boundTransport)(nil)
