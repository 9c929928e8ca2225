package gossip

import (
	"log"
	"net"
	"os"
	"testing"
	"time"
)

// Gossip's TCP connections leave from the agent's bind address, not
// whatever the kernel picks.
func TestTransportDialsFromTheBindAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const bind = "127.0.0.77"
	tr, err := newBoundTransport(bind, 0, log.New(os.Stderr, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown()
	accepted := make(chan net.Addr, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		accepted <- c.RemoteAddr()
		c.Close()
	}()
	c, err := tr.DialTimeout(ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	select {
	case from := <-accepted:
		if ip := from.(*net.TCPAddr).IP.String(); ip != bind {
			t.Fatalf("connection from %s, want %s", ip, bind)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no connection accepted")
	}
}
