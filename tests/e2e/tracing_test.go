package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/tests/framework/otlptest"
	"github.com/plugreg/plugreg/tests/framework/proctest"
)

// Real agents with -trace-endpoint send a traced write's spans to an
// OTLP/HTTP collector: a write through any server or a client agent,
// carrying a caller's sampled traceparent, is one trace whose spans come
// from several agents (every server's apply among them), each hanging
// from the caller's span through the trace's own. The agents then stop on
// SIGTERM as always (StartCluster's cleanup), flushing what is queued.
func TestAgentsExportOneTracePerWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	rcv := otlptest.Start(t)
	c := proctest.StartCluster(t, proctest.ClusterConfig{ServerArgs: []string{"-trace-endpoint", rcv.URL}})
	cl := c.StartClient(t, "client-1", "127.0.0.1", "-trace-endpoint", rcv.URL)
	c.WaitReady(t)
	servers := map[string]bool{}
	for _, s := range c.Servers {
		servers[s.Node] = true
	}
	for _, a := range append(slices.Clone(c.Servers), cl) {
		t.Run(a.Node, func(t *testing.T) {
			var tid, sid [16]byte
			rand.Read(tid[:])
			rand.Read(sid[:8])
			traceID, parent := hex.EncodeToString(tid[:]), hex.EncodeToString(sid[:8])
			body, _ := json.Marshal(&api.PluginInfo{Type: "csi", Name: "traced", AllocID: a.Node, NodeID: "host1",
				ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/traced.sock"}})
			c.Poll(t, "the write through "+a.Node+" is answered", func() (bool, string) {
				req, _ := http.NewRequest(http.MethodPost, "http://"+a.HTTP+"/v1/plugins", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Traceparent", fmt.Sprintf("00-%s-%s-01", traceID, parent))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return false, err.Error()
				}
				resp.Body.Close()
				return resp.StatusCode == http.StatusOK, resp.Status
			})
			c.Poll(t, "the write's trace reaches the collector from every server", func() (bool, string) {
				spans := rcv.Spans(traceID)
				ids := map[string]bool{parent: true}
				for _, s := range spans {
					ids[s.SpanID] = true
				}
				applied := map[string]bool{}
				nodes := map[string]bool{}
				for _, s := range spans {
					if !ids[s.ParentSpanID] {
						return false, fmt.Sprintf("span %s of %s hangs from %s, not in the trace (yet)", s.Name, s.Node, s.ParentSpanID)
					}
					if s.Service != "plugreg" {
						t.Fatalf("span %s from service %q", s.Name, s.Service)
					}
					nodes[s.Node] = true
					if s.Name == "fsm.apply" {
						applied[s.Node] = true
					}
				}
				for n := range servers {
					if !applied[n] {
						return false, fmt.Sprintf("no fsm.apply from %s among %d spans", n, len(spans))
					}
				}
				if !nodes[a.Node] {
					return false, fmt.Sprintf("no span from %s, the agent called", a.Node)
				}
				return true, ""
			})
		})
	}
}
