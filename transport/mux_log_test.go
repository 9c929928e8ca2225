package transport

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/plugreg/plugreg/tests/framework/testlog"
)

// A connection closed before its first byte is a dial its client gave up
// (thousands of them in a fleet's start storm): it is not warned about. A
// connection that sends a byte no protocol has still is.
func TestMuxWarnsOnlyAboutConnectionsThatSaidSomething(t *testing.T) {
	m, logs := listenLoggingWarnings(t)
	dial := func(send []byte) {
		conn, err := net.Dial("tcp", m.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conn.Write(send)
		conn.Close()
	}
	dial(nil)          // given up
	dial([]byte{0xEE}) // no protocol's
	// Accepted in order, so once the second is warned about the first
	// was accepted too, and Close waits for its handler.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && !strings.Contains(logs.String(), "[WARN]") {
		time.Sleep(10 * time.Millisecond)
	}
	m.Close()
	out := logs.String()
	if n := strings.Count(out, "[WARN]"); n != 1 || !strings.Contains(out, "unknown protocol byte") {
		t.Fatalf("%d warnings, want 1, about the unknown protocol byte; log:\n%s", n, out)
	}
}

// A connection still silent when the server shuts down is closed by the
// shutdown, not refused: at a fleet's scale a restart closes hundreds of
// them, and a warning each would bury the ones that matter.
func TestMuxShutdownDoesNotWarnAboutSilentConnections(t *testing.T) {
	m, logs := listenLoggingWarnings(t)
	conn, err := net.Dial("tcp", m.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	accepted := func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return len(m.conns) == 1
	}
	for deadline := time.Now().Add(10 * time.Second); !accepted(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the connection was never accepted")
		}
	}
	m.Close()
	if out := logs.String(); strings.Contains(out, "[WARN]") {
		t.Fatalf("a warning at shutdown; log:\n%s", out)
	}
}

// listenLoggingWarnings is a Mux on loopback whose warnings go to the
// returned buffer.
func listenLoggingWarnings(t *testing.T) (*Mux, *testlog.Buffer) {
	t.Helper()
	logs := &testlog.Buffer{}
	logger := hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Warn})
	h := func(context.Context, string, func(interface{}) error) (interface{}, error) { return nil, nil }
	m, err := Listen("127.0.0.1:0", ServeRPC(context.Background(), h, ServeOptions{}), logger, nil)
	if err != nil {
		t.Fatal(err)
	}
	return m, logs
}
