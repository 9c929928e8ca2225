package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

// hungNode is a TCP listener that accepts connections and never answers:
// a node whose process is paused or whose host drops its packets after
// the handshake. Its address is host:port.
func hungNode(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never read or written
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// A call whose deadline runs out on a node that never answers leaves that
// node: the next call starts on the next one, instead of waiting on the
// hung node again until its own deadline.
func TestCallCutShortOnAHungNodeMovesOn(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{})
	cl, err := client.New(client.Config{Addrs: []string{hungNode(t), c.Nodes[0].HTTPURL}})
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := cl.Register(short, plugin("ebs", "a1")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("through the hung node: %v; want its deadline", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cl.Register(ctx, plugin("ebs", "a1")); err != nil {
		t.Fatalf("the next call: %v", err)
	}
	if got := cl.Addrs()[0]; got != c.Nodes[0].HTTPURL {
		t.Fatalf("the client uses %s; want the node that answers, %s", got, c.Nodes[0].HTTPURL)
	}
}

// KeepAlive keeps a lease through nodes that hang: a renewal gets as long
// as the wait between two, then goes to the next node, so the lease does
// not run out while one node holds the renewal. The first address hangs;
// later the node in use is killed and the next address hangs too.
func TestKeepAliveThroughHungNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("holds a lease for several TTLs")
	}
	c := testcluster.New(t, 3, testcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ttl = 3 * time.Second
	p := plugin("ebs", "leased")
	p.TTL = api.Duration(ttl)
	if _, err := newClient(t, c, 0).Register(ctx, p); err != nil {
		t.Fatal(err)
	}
	holder, err := client.New(client.Config{Addrs: []string{hungNode(t), c.Nodes[1].HTTPURL, hungNode(t), c.Nodes[2].HTTPURL}, RetryWait: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	kctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- holder.KeepAlive(kctx, "csi", "ebs", "leased", 0) }()
	reader := newClient(t, c, 0)
	held := func(what string, d time.Duration) {
		t.Helper()
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
			select {
			case err := <-done:
				t.Fatalf("%s: KeepAlive returned %v", what, err)
			default:
			}
			if _, _, err := reader.Get(ctx, "csi", "ebs", "leased", nil); err != nil {
				t.Fatalf("%s: the lease ran out: %v", what, err)
			}
		}
	}
	held("past the first hung node", 3*ttl)
	c.Kill(1) // the node in use: the next address hangs, the one after answers
	held("past the second hung node", 3*ttl)
	stop()
	if err := <-done; err != nil {
		t.Fatalf("KeepAlive at its context's end: %v", err)
	}
}

// synDropper is a listening socket whose accept queue is full and never
// drained: the kernel drops every further SYN, as a host behind a
// partition does, so a dial to it hangs until its timeout. Linux only.
func synDropper(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	// Fill the queue: dials complete until it is full, then one hangs.
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
		if err != nil {
			break
		}
		t.Cleanup(func() { c.Close() })
		if i > 16 {
			t.Skip("the kernel never dropped a SYN to a full accept queue")
		}
	}
	return addr
}

// The default client bounds its dials: a node that drops SYNs costs a
// call the dial timeout (2 s, etcdctl's), then it moves on (the OS alone
// would retry for minutes).
func TestDialToADroppingNodeMovesOn(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a dial timeout")
	}
	c := testcluster.New(t, 1, testcluster.Options{})
	cl, err := client.New(client.Config{Addrs: []string{synDropper(t), c.Nodes[0].HTTPURL}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	began := time.Now()
	if _, err := cl.Register(ctx, plugin("ebs", "a1")); err != nil {
		t.Fatalf("through a node that drops SYNs, then one that answers: %v", err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("the register took %v: more than a 2 s dial and an answer", took)
	}
}

// KeepAlive keeps a lease through a restart of the only agent it knows:
// while nothing listens, the renewal fails at once (ErrNoAgent) and is
// tried again, not returned, and the lease is held once the agent is back.
func TestKeepAliveThroughTheAgentsRestart(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := plugin("ebs", "leased")
	p.TTL = api.Duration(3 * time.Second)
	cl := newClient(t, c, 0)
	if _, err := cl.Register(ctx, p); err != nil {
		t.Fatal(err)
	}
	kctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cl.KeepAlive(kctx, "csi", "ebs", "leased", 0) }()
	c.Kill(0)
	time.Sleep(time.Second) // renewals refused meanwhile: nothing to poll
	select {
	case err := <-done:
		t.Fatalf("KeepAlive returned while the agent was down: %v", err)
	default:
	}
	c.Restart(0)
	c.WaitForLeader()
	for end := time.Now().Add(3 * time.Duration(p.TTL)); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("KeepAlive returned: %v", err)
		default:
		}
		if _, _, err := cl.Get(ctx, "csi", "ebs", "leased", nil); err != nil {
			t.Fatalf("the lease ran out after the restart: %v", err)
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("KeepAlive at its context's end: %v", err)
	}
}
