package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

// closedPort is a loopback address where nothing listens: a dial to it is
// refused.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// A call to addresses where nothing listens fails at once, naming them,
// with an error callers can test (client.ErrNoAgent, and the system's
// ECONNREFUSED), instead of retrying until its context ends (the CLI was
// silent for its 30 s, then said "context deadline exceeded").
func TestNoAgentFailsAtOnce(t *testing.T) {
	one, two := closedPort(t), closedPort(t)
	cases := []struct {
		name  string
		addrs []string
		want  string
	}{
		{"one address", []string{one}, "no plugreg agent at " + one + ": connection refused"},
		{"every address", []string{one, "http://" + two}, "no plugreg agent at " + one + ", " + two + ": connection refused"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cl, err := client.New(client.Config{Addrs: tc.addrs})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			began := time.Now()
			_, _, err = cl.List(ctx, "csi-node", nil)
			if took := time.Since(began); took > 5*time.Second {
				t.Fatalf("List took %v: it retried addresses where nothing listens", took)
			}
			if !errors.Is(err, client.ErrNoAgent) || !errors.Is(err, syscall.ECONNREFUSED) || err.Error() != tc.want {
				t.Fatalf("List: %v; want %q, matching ErrNoAgent and ECONNREFUSED", err, tc.want)
			}
		})
	}
}

// Failures that waiting cures are still retried: a node that refuses
// while another answers, and a cluster without a leader (its nodes' 503s)
// whose other nodes refuse connections while they restart.
func TestTransientFailuresAreRetried(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	cl, err := client.New(client.Config{Addrs: []string{closedPort(t), c.Nodes[0].HTTPURL}, RetryWait: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Register(ctx, plugin("ebs", "a1")); err != nil {
		t.Fatalf("through a refusing address, then a node: %v", err)
	}

	all := newClient(t, c, 0)
	c.Kill(1)
	c.Kill(2) // no quorum: node 0 answers 503, nodes 1 and 2 refuse
	done := make(chan error, 1)
	go func() {
		_, err := all.Register(ctx, plugin("ebs", "a2"))
		done <- err
	}()
	time.Sleep(time.Second) // the write is being retried: nothing to poll
	select {
	case err := <-done:
		t.Fatalf("the write ended while the cluster had no leader: %v", err)
	default:
	}
	c.Restart(1)
	c.Restart(2)
	if err := <-done; err != nil {
		t.Fatalf("the write after the cluster came back: %v", err)
	}
}

// htmlServer is a web server on loopback that is not a plugreg agent (a
// Consul agent's UI, any web server): every path answers status with an
// HTML page.
func htmlServer(t *testing.T, status int) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(status)
		fmt.Fprintln(w, "<!doctype html><html><head><title>Not plugreg</title></head><body>Not here</body></html>")
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// An address that answers HTTP but not as a plugreg agent is named in one
// line that says so (ErrNotPlugreg), at once; with another address that is
// a plugreg agent, the call goes there.
func TestAnAnswerNotPlugregs(t *testing.T) {
	for _, status := range []int{http.StatusNotFound, http.StatusOK} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			addr := htmlServer(t, status)
			cl, err := client.New(client.Config{Addrs: []string{addr}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, _, err = cl.List(ctx, "csi-node", nil)
			want := fmt.Sprintf("%s answered HTTP %d (text/html; charset=utf-8), not as a plugreg agent: is it the right address?", addr, status)
			if !errors.Is(err, client.ErrNotPlugreg) || err.Error() != want || ctx.Err() != nil {
				t.Fatalf("List: %v; want %q at once", err, want)
			}
		})
	}
	t.Run("then a plugreg agent", func(t *testing.T) {
		c := testcluster.New(t, 1, testcluster.Options{})
		cl, err := client.New(client.Config{Addrs: []string{htmlServer(t, http.StatusNotFound), c.Nodes[0].HTTPURL}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, _, err := cl.Get(ctx, "csi", "ebs", "zz", nil); !errors.Is(err, api.ErrNotFound) {
			t.Fatalf("Get: %v; want the agent's answer (no such instance)", err)
		}
	})
}

// A stream no node will ever open ends with why, as a call does: where
// nothing listens (ErrNoAgent) or something else answers (ErrNotPlugreg)
// at once; a node that accepts and never answers is left after the stall
// timeout, and when the stream's deadline passes with no node streaming,
// Err is that deadline with the last failure: Events never stays open and
// silent with a nil Err, which a stall timer started only by an answer
// would allow.
func TestStreamThatNoNodeOpensSaysWhy(t *testing.T) {
	cases := []struct {
		name    string
		addr    string
		timeout time.Duration
		is      error
		says    string
	}{
		{"nothing listens", closedPort(t), 30 * time.Second, client.ErrNoAgent, "connection refused"},
		{"a web server", htmlServer(t, http.StatusNotFound), 30 * time.Second, client.ErrNotPlugreg, "not as a plugreg agent"},
		{"a node that never answers", hungNode(t), 3 * time.Second, context.DeadlineExceeded, "no answer within 500ms"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cl, err := client.New(client.Config{Addrs: []string{tc.addr}, RetryWait: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), tc.timeout)
			defer cancel()
			s := cl.Stream(ctx, 0, client.WatchOptions{StallTimeout: 500 * time.Millisecond})
			for range s.Events() {
			}
			if tc.is != context.DeadlineExceeded && ctx.Err() != nil {
				t.Fatalf("the stream went on until its context ended (Err: %v)", s.Err())
			}
			if err := s.Err(); !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("Err: %v; want one matching %v that says %q", err, tc.is, tc.says)
			}
		})
	}
}

// A Client an agent has answered retries a refused connection: its agents
// are restarting (a rolling restart refuses every address in turn), not
// wrong. A write through a restart succeeds once the agent is back,
// where a fresh Client fails at once (TestNoAgentFailsAtOnce).
func TestAnsweredClientRidesOutARestart(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := newClient(t, c, 0)
	if _, err := cl.Register(ctx, plugin("ebs", "a1")); err != nil {
		t.Fatal(err)
	}
	c.Kill(0)
	done := make(chan error, 1)
	go func() {
		_, err := cl.Register(ctx, plugin("ebs", "a2"))
		done <- err
	}()
	time.Sleep(500 * time.Millisecond) // refused meanwhile: nothing to poll
	select {
	case err := <-done:
		t.Fatalf("the write ended while the agent was down: %v", err)
	default:
	}
	c.Restart(0)
	if err := <-done; err != nil {
		t.Fatalf("the write through the restart: %v", err)
	}
}
