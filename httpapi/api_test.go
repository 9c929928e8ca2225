package httpapi_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/api/pluginpb"
	"github.com/plugreg/plugreg/httpapi"
	"github.com/plugreg/plugreg/telemetry"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/encoding/protowire"
)

type reply struct {
	status int
	header http.Header
	body   string
}

func call(t *testing.T, method, url, body string, hdr ...string) reply {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, strings.TrimSpace(string(b))}
}

const ebs = `{"Type":"csi","Name":"ebs","AllocID":"a1","Version":"1","NodeID":"n1","ConnectionInfo":{"SocketPath":"/run/ebs.sock"}}`

func TestAPI(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	f := c.Followers()[0].HTTPURL // everything through a follower
	big := `{"Type":"csi","Name":"big","AllocID":"a","ConnectionInfo":{"SocketPath":"/x"},"Options":{"k":"` + strings.Repeat("v", 200*1024) + `"}}`
	manyOpts := `{"Type":"csi","Name":"o","AllocID":"a","ConnectionInfo":{"SocketPath":"/x"},"Options":{`
	for i := 0; i < 65; i++ {
		manyOpts += fmt.Sprintf(`"k%d":"v",`, i)
	}
	manyOpts = strings.TrimSuffix(manyOpts, ",") + "}}"
	// Registration bodies in protobuf (api.PluginProtobuf).
	pb := func(p *api.PluginInfo, extra ...byte) string {
		b, err := pluginpb.FromPlugin(p).MarshalVT()
		if err != nil {
			t.Fatal(err)
		}
		return string(append(b, extra...))
	}
	pbEBS := &api.PluginInfo{Type: "csi", Name: "ebs", AllocID: "p1", NodeID: "n1", Options: map[string]string{"k": "v"},
		ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/ebs.sock"}}
	pbHdr := []string{"Content-Type", api.PluginProtobuf}
	unknownField := protowire.AppendString(protowire.AppendTag(nil, 99, protowire.BytesType), "future")
	bigPB := pbEBS.Copy()
	bigPB.Options = map[string]string{"k": strings.Repeat("v", 200*1024)}

	cases := []struct {
		name   string
		method string
		path   string
		body   string
		hdr    []string
		status int
		want   string // substring of the body
	}{
		{"register", "POST", "/v1/plugins", ebs, nil, 200, `"Result":"registered"`},
		{"register again is unchanged", "POST", "/v1/plugins", ebs, nil, 200, `"Result":"unchanged"`},
		{"register changed is updated", "POST", "/v1/plugins", strings.Replace(ebs, `"Version":"1"`, `"Version":"2"`, 1), nil, 200, `"Result":"updated"`},
		{"second instance", "POST", "/v1/plugins", strings.Replace(ebs, `"a1"`, `"a2"`, 1), nil, 200, `"Result":"registered"`},
		{"register in protobuf", "POST", "/v1/plugins", pb(pbEBS), pbHdr, 200, `"Result":"registered"`},
		{"protobuf read back", "GET", "/v1/plugins/csi/ebs/p1", "", nil, 200, `"Options":{"k":"v"}`},
		{"protobuf again is unchanged", "POST", "/v1/plugins", pb(pbEBS), []string{"Content-Type", api.PluginProtobuf + "; foo=bar"}, 200, `"Result":"unchanged"`},
		{"protobuf with an unknown field", "POST", "/v1/plugins", pb(pbEBS, unknownField...), pbHdr, 400, `does not know, in plugreg.plugin.v1.PluginInfo`},
		{"protobuf that does not parse", "POST", "/v1/plugins", "\x0a\x7f", pbHdr, 400, `protobuf body`},
		{"protobuf of an invalid plugin", "POST", "/v1/plugins", pb(&api.PluginInfo{Type: "csi", AllocID: "a"}), pbHdr, 400, `"code":"invalid"`},
		{"protobuf too large", "POST", "/v1/plugins", pb(bigPB), pbHdr, 413, `"code":"too_large"`},
		{"JSON with its charset", "POST", "/v1/plugins", strings.Replace(ebs, `"Version":"1"`, `"Version":"2"`, 1), []string{"Content-Type", "application/json; charset=utf-8"}, 200, `"Result":"unchanged"`},
		{"leased instance", "POST", "/v1/plugins", strings.Replace(ebs, `"a1"`, `"l1","TTL":"30s"`, 1), nil, 200, `"Result":"registered"`},
		{"leased instance read back", "GET", "/v1/plugins/csi/ebs/l1", "", nil, 200, `"TTL":"30s"`},
		{"TTL too short", "POST", "/v1/plugins", strings.Replace(ebs, `"a1"`, `"l2","TTL":"500ms"`, 1), nil, 400, `TTL 500ms`},
		{"TTL too long", "POST", "/v1/plugins", strings.Replace(ebs, `"a1"`, `"l2","TTL":"25h"`, 1), nil, 400, `TTL 25h0m0s`},
		{"TTL as a number", "POST", "/v1/plugins", strings.Replace(ebs, `"a1"`, `"l2","TTL":30`, 1), nil, 400, `a TTL (a duration) is a string such as \"30s\", not 30`},
		{"renew", "PUT", "/v1/plugins/csi/ebs/l1/renew", "", nil, 200, `{"TTL":"30s"}`},
		{"renew without a lease", "PUT", "/v1/plugins/csi/ebs/a1/renew", "", nil, 404, `registered without a TTL`},
		{"renew absent", "PUT", "/v1/plugins/csi/ebs/zz/renew", "", nil, 404, `"code":"not_found"`},
		{"renew a bad name", "PUT", "/v1/plugins/csi/e%01bs/l1/renew", "", nil, 400, `control character`},
		{"renew with GET", "GET", "/v1/plugins/csi/ebs/l1/renew", "", nil, 405, `"code":"method_not_allowed"`},
		{"other name", "POST", "/v1/plugins", strings.Replace(ebs, `"ebs"`, `"aws"`, 1), nil, 200, `"Result":"registered"`},
		{"empty name", "POST", "/v1/plugins", strings.Replace(ebs, `"ebs"`, `""`, 1), nil, 400, `"code":"invalid"`},
		{"no connection info", "POST", "/v1/plugins", `{"Type":"csi","Name":"x","AllocID":"a"}`, nil, 400, `ConnectionInfo`},
		{"unknown field", "POST", "/v1/plugins", `{"Type":"csi","Nmae":"x"}`, nil, 400, `unknown field`},
		{"not json", "POST", "/v1/plugins", `hello`, nil, 400, `"code":"invalid"`},
		{"empty body", "POST", "/v1/plugins", ``, nil, 400, `empty body`},
		{"two values", "POST", "/v1/plugins", ebs + ebs, nil, 400, `more than one`},
		{"body too large", "POST", "/v1/plugins", big, nil, 413, `"code":"too_large"`},
		{"too many options", "POST", "/v1/plugins", manyOpts, nil, 413, `options`},
		{"request id too long", "POST", "/v1/plugins", ebs, []string{"X-Plugreg-Request-Id", strings.Repeat("r", 200)}, 413, `Request-Id`},
		{"list sorted by name", "GET", "/v1/plugins/csi", "", nil, 200, `"Name":"aws"`},
		{"recency list", "GET", "/v1/plugins/csi/ebs", "", nil, 200, `"AllocID":"a2"`},
		{"one instance", "GET", "/v1/plugins/csi/ebs/a1", "", nil, 200, `"Version":"2"`},
		{"absent instance", "GET", "/v1/plugins/csi/ebs/zz", "", nil, 404, `"code":"not_found"`},
		{"absent name", "GET", "/v1/plugins/csi/nope", "", nil, 404, `"code":"not_found"`},
		{"absent type lists nothing", "GET", "/v1/plugins/nope", "", nil, 200, `[]`},
		{"types", "GET", "/v1/types", "", nil, 200, `["csi"]`},
		{"stale read", "GET", "/v1/plugins/csi?consistency=stale", "", nil, 200, `"Name":"aws"`},
		{"bad consistency", "GET", "/v1/plugins/csi?consistency=eventual", "", nil, 400, `consistency`},
		{"bad index", "GET", "/v1/plugins/csi?index=x", "", nil, 400, `index`},
		{"bad wait", "GET", "/v1/plugins/csi?index=1&wait=soon", "", nil, 400, `wait`},
		{"deregister absent", "DELETE", "/v1/plugins/csi/ebs/zz", "", nil, 200, `"Result":"absent"`},
		{"a node's plugins", "GET", "/v1/nodes/n1/plugins", "", nil, 200, `"Name":"aws"`},
		{"another node's plugins", "GET", "/v1/nodes/n9/plugins", "", nil, 200, `[]`},
		{"conditional: another node owns it", "DELETE", "/v1/plugins/csi/aws/a1?node=n2", "", nil, 409, `"code":"conflict"`},
		{"conditional: changed since", "DELETE", "/v1/plugins/csi/aws/a1?index=1", "", nil, 409, `last changed at index`},
		{"conditional: bad index", "DELETE", "/v1/plugins/csi/aws/a1?index=x", "", nil, 400, `index`},
		{"conditional: empty node", "DELETE", "/v1/plugins/csi/aws/a1?node=", "", nil, 400, `node is empty`},
		{"still there after the refusals", "GET", "/v1/plugins/csi/aws/a1", "", nil, 200, `"AllocID":"a1"`},
		{"conditional: absent is absent", "DELETE", "/v1/plugins/csi/aws/zz?node=n2", "", nil, 200, `"Result":"absent"`},
		{"conditional: owner deregisters", "DELETE", "/v1/plugins/csi/aws/a1?node=n1", "", nil, 200, `"Result":"deregistered"`},
		{"deregister", "DELETE", "/v1/plugins/csi/ebs/a2", "", nil, 200, `"Result":"deregistered"`},
		{"deregister node", "DELETE", "/v1/nodes/n1/plugins", "", nil, 200, `"Result":"deregistered"`},
		{"leader", "GET", "/v1/status/leader", "", nil, 200, c.Leader().RaftAddr()},
		{"peers", "GET", "/v1/status/peers", "", nil, 200, c.Leader().RaftAddr()},
		{"members", "GET", "/v1/members", "", nil, 200, `"Role":"server"`},
		{"health", "GET", "/v1/health", "", nil, 200, `"Status":"ok"`},
		{"unknown route", "GET", "/v1/nothing", "", nil, 404, `"code":"not_found"`},
		{"wrong method", "PUT", "/v1/plugins", ebs, nil, 405, `"code":"method_not_allowed"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := call(t, tc.method, f+tc.path, tc.body, tc.hdr...)
			if r.status != tc.status || !strings.Contains(r.body, tc.want) {
				t.Fatalf("%s %s: %d %s; want %d containing %s", tc.method, tc.path, r.status, r.body, tc.status, tc.want)
			}
			if tc.method == "GET" && r.status == 200 && strings.HasPrefix(tc.path, "/v1/plugins") {
				for _, h := range []string{"X-Plugreg-Index", "X-Plugreg-Known-Leader", "X-Plugreg-Last-Contact"} {
					if r.header.Get(h) == "" {
						t.Errorf("missing header %s", h)
					}
				}
			}
		})
	}
	// The list is sorted by name and holds the newest instance of each.
	var list []struct{ Name, AllocID string }
	json.Unmarshal([]byte(call(t, "GET", f+"/v1/plugins/csi", "").body), &list)
	if len(list) != 0 {
		t.Fatalf("after deregistering node n1, list = %+v", list)
	}
}

func TestBlockingQuery(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	f := c.Followers()[0].HTTPURL
	r := call(t, "POST", f+"/v1/plugins", ebs)
	idx := r.header.Get("X-Plugreg-Index")
	done := make(chan reply, 1)
	go func() {
		done <- call(t, "GET", f+"/v1/plugins/csi?index="+idx+"&wait=20s", "")
	}()
	// A write to another type does not wake the query; one to csi does.
	call(t, "POST", c.Leader().HTTPURL+"/v1/plugins", strings.Replace(ebs, `"csi"`, `"device"`, 1))
	select {
	case r := <-done:
		t.Fatalf("blocking query returned on another type's write: %s", r.body)
	case <-time.After(300 * time.Millisecond):
	}
	call(t, "POST", c.Leader().HTTPURL+"/v1/plugins", strings.Replace(ebs, `"a1"`, `"a2"`, 1))
	select {
	case r := <-done:
		if r.status != 200 || !strings.Contains(r.body, `"AllocID":"a2"`) {
			t.Fatalf("blocking query: %d %s", r.status, r.body)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("blocking query did not return after the write")
	}
}

// A node without a leader answers 503 with a retry hint and the write's
// outcome, within the request's deadline; stale reads still work there.
func TestMinorityAnswers503(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	i := 0
	for j, n := range c.Nodes {
		if !n.IsLeader() {
			i = j
		}
	}
	first := call(t, "POST", c.Leader().HTTPURL+"/v1/plugins", ebs)
	n := c.Nodes[i]
	idx, _ := strconv.ParseUint(first.header.Get("X-Plugreg-Index"), 10, 64)
	// A commit needs only a majority: let the future minority apply it too.
	c.Eventually(10*time.Second, "the minority to apply the first write", func() bool { return n.AppliedIndex() >= idx })
	c.Partition(i)
	c.Eventually(10*time.Second, "the minority to lose its leader", func() bool { return n.Leader() == "" })
	r := call(t, "POST", n.HTTPURL+"/v1/plugins", strings.Replace(ebs, `"a1"`, `"a9"`, 1))
	var eb httpapi.ErrorBody
	json.Unmarshal([]byte(r.body), &eb)
	if r.status != 503 || eb.Code != "no_leader" || eb.Outcome != "not_applied" || r.header.Get("Retry-After") == "" {
		t.Fatalf("write on minority: %d %s (Retry-After %q)", r.status, r.body, r.header.Get("Retry-After"))
	}
	if r := call(t, "GET", n.HTTPURL+"/v1/plugins/csi", ""); r.status != 503 {
		t.Fatalf("linearizable read on minority: %d %s", r.status, r.body)
	}
	r = call(t, "GET", n.HTTPURL+"/v1/plugins/csi?consistency=stale", "")
	if r.status != 200 || !strings.Contains(r.body, `"a1"`) || r.header.Get("X-Plugreg-Known-Leader") != "false" {
		t.Fatalf("stale read on minority: %d %s %v", r.status, r.body, r.header)
	}
	if r := call(t, "GET", n.HTTPURL+"/v1/health", ""); r.status != 503 {
		t.Fatalf("health on minority: %d", r.status)
	}
}

func TestEventStream(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{Heartbeat: 100 * time.Millisecond})
	f := c.Followers()[0].HTTPURL
	resp, err := http.Get(f + "/v1/events?type=csi&index=0")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	call(t, "POST", c.Leader().HTTPURL+"/v1/plugins", strings.Replace(ebs, `"csi"`, `"device"`, 1))
	w := call(t, "POST", c.Leader().HTTPURL+"/v1/plugins", ebs)
	call(t, "DELETE", c.Leader().HTTPURL+"/v1/plugins/csi/ebs/a1", "")

	sc := bufio.NewScanner(resp.Body)
	var got []string
	for len(got) < 2 && sc.Scan() {
		var ev struct {
			Index     uint64
			EventType string
			Info      *struct{ Type, AllocID string }
			Current   *struct{ AllocID string }
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("bad line %q: %v", sc.Text(), err)
		}
		if ev.EventType == "heartbeat" {
			continue
		}
		if ev.Info.Type != "csi" {
			t.Fatalf("event of type %s passed the filter", ev.Info.Type)
		}
		got = append(got, fmt.Sprintf("%s@%d current=%v", ev.EventType, ev.Index, ev.Current != nil))
	}
	want := []string{"registered@" + w.header.Get("X-Plugreg-Index") + " current=true"}
	if len(got) < 2 || got[0] != want[0] || !strings.HasPrefix(got[1], "deregistered@") || !strings.HasSuffix(got[1], "current=false") {
		t.Fatalf("stream = %v, want %v then deregistered with no current", got, want)
	}
	// Heartbeats follow while idle.
	for sc.Scan() {
		if strings.Contains(sc.Text(), `"heartbeat"`) {
			return
		}
	}
	t.Fatalf("no heartbeat: %v", sc.Err())
}

func TestTokenRequiredForWrites(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{Token: "s3cret"})
	u := c.Nodes[0].HTTPURL
	cases := []struct {
		name, method, path, body string
		hdr                      []string
		status                   int
	}{
		{"write without token", "POST", "/v1/plugins", ebs, nil, 403},
		{"write with wrong token", "POST", "/v1/plugins", ebs, []string{"X-Plugreg-Token", "nope"}, 403},
		{"write with token", "POST", "/v1/plugins", ebs, []string{"X-Plugreg-Token", "s3cret"}, 200},
		{"write with a bearer token", "POST", "/v1/plugins", ebs, []string{"Authorization", "Bearer s3cret"}, 200},
		{"write with a wrong bearer token", "POST", "/v1/plugins", ebs, []string{"Authorization", "Bearer nope"}, 403},
		{"write with basic auth", "POST", "/v1/plugins", ebs, []string{"Authorization", "Basic czNjcmV0"}, 403},
		{"deregister without token", "DELETE", "/v1/plugins/csi/ebs/a1", "", nil, 403},
		{"leave without token", "PUT", "/v1/agent/leave", "", nil, 403},
		{"reads need none", "GET", "/v1/plugins/csi", "", nil, 200},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if r := call(t, tc.method, u+tc.path, tc.body, tc.hdr...); r.status != tc.status {
				t.Fatalf("%d %s, want %d", r.status, r.body, tc.status)
			}
		})
	}
}

// A client that opens an event stream and stops reading must not pin the
// handler (and its subscription) forever: once a write has been blocked
// for StreamWriteTimeout, the server ends the stream.
func TestEventStreamDropsAClientThatStopsReading(t *testing.T) {
	sink := telemetry.NewSink()
	if err := telemetry.Use(sink); err != nil {
		t.Fatal(err)
	}
	c := testcluster.New(t, 1, testcluster.Options{StreamWriteTimeout: 500 * time.Millisecond})
	n := c.Nodes[0]
	conn, err := net.Dial("tcp", strings.TrimPrefix(n.HTTPURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /v1/events?type=big&index=0 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	// Far more than the socket buffers hold, and the client reads none.
	value := strings.Repeat("v", 60*1024)
	for i := 0; i < 300; i++ {
		body := fmt.Sprintf(`{"Type":"big","Name":"p%d","AllocID":"a","ConnectionInfo":{"SocketPath":"/x"},"Options":{"k":"%s"}}`, i, value)
		if r := call(t, "POST", n.HTTPURL+"/v1/plugins", body); r.status != http.StatusOK {
			t.Fatalf("register %d: %d %s", i, r.status, r.body)
		}
	}
	time.Sleep(time.Second) // past the write timeout
	// Now read: what was buffered, then the end of the stream. A stream
	// still being served would go on with heartbeats (every 200ms) forever.
	deadline := time.Now().Add(30 * time.Second)
	buf := make([]byte, 1<<20)
	for {
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := conn.Read(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("the stream neither ended nor sent anything for 5s")
			}
			// EOF or reset: the server ended the stream, and counted it.
			if n, _ := sink.Value("plugreg_http_streams_dropped_total"); n != 1 {
				t.Fatalf("plugreg_http_streams_dropped_total %v, want 1", n)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the server still streams to a client that stopped reading")
		}
	}
}

// A list is encoded once per index and node: asked again at the same
// index it is the same bytes; after a write to its type it shows the
// write, after a write to another type it is still right; on every node.
func TestListAnswersFollowWrites(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	list := func(url, typ string) reply {
		t.Helper()
		r := call(t, "GET", url+"/v1/plugins/"+typ, "")
		if r.status != 200 {
			t.Fatalf("list %s: %d %s", typ, r.status, r.body)
		}
		return r
	}
	names := func(r reply) string {
		var ps []struct{ Name, AllocID, Version string }
		if err := json.Unmarshal([]byte(r.body), &ps); err != nil {
			t.Fatalf("list body %q: %v", r.body, err)
		}
		var out []string
		for _, p := range ps {
			out = append(out, p.Name+"/"+p.AllocID+"@"+p.Version)
		}
		return strings.Join(out, ",")
	}
	reg := func(url, body string) {
		t.Helper()
		if r := call(t, "POST", url+"/v1/plugins", body); r.status != 200 {
			t.Fatalf("register: %d %s", r.status, r.body)
		}
	}
	for _, n := range c.Nodes {
		if r := list(n.HTTPURL, "csi"); r.body != "[]" {
			t.Fatalf("empty list is %q", r.body)
		}
	}
	steps := []struct {
		write string // registered through node 0 before the lists
		want  string // the csi list on every node
	}{
		{ebs, "ebs/a1@1"},
		{strings.Replace(ebs, `"Version":"1"`, `"Version":"2"`, 1), "ebs/a1@2"},
		{strings.Replace(ebs, `"csi"`, `"dev"`, 1), "ebs/a1@2"}, // another type moves the index
		{strings.Replace(ebs, `"ebs"`, `"aws"`, 1), "aws/a1@1,ebs/a1@2"},
	}
	for i, st := range steps {
		reg(c.Nodes[0].HTTPURL, st.write)
		for _, n := range c.Nodes {
			first := list(n.HTTPURL, "csi") // linearizable: sees the write
			again := list(n.HTTPURL, "csi")
			if got := names(first); got != st.want {
				t.Fatalf("step %d, %s: list %s, want %s", i, n.NodeID(), got, st.want)
			}
			if first.header.Get("X-Plugreg-Index") == again.header.Get("X-Plugreg-Index") && first.body != again.body {
				t.Fatalf("step %d, %s: two answers at index %s differ:\n%s\n%s", i, n.NodeID(), first.header.Get("X-Plugreg-Index"), first.body, again.body)
			}
		}
	}
}

// The event stream is JSON lines unless the Accept header names the
// protobuf stream; that one is protodelim's framing of pluginpb.Events, so
// the protobuf library's own reader reads it.
func TestEventStreamNegotiatesProtobuf(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{Heartbeat: 100 * time.Millisecond})
	u := c.Nodes[0].HTTPURL
	w := call(t, "POST", u+"/v1/plugins", ebs)
	idx, _ := strconv.ParseUint(w.header.Get("X-Plugreg-Index"), 10, 64)
	cases := []struct {
		accept, contentType string
	}{
		{"", "application/x-ndjson"},
		{"application/json", "application/x-ndjson"},
		{"application/vnd.plugreg.events+protobuf", api.EventStreamProtobuf},
		{"application/x-ndjson;q=0.5, APPLICATION/VND.PLUGREG.EVENTS+PROTOBUF; q=1", api.EventStreamProtobuf},
		{"application/vnd.plugreg.events+protobufx", "application/x-ndjson"},
	}
	for _, tc := range cases {
		t.Run(tc.accept, func(t *testing.T) {
			req, _ := http.NewRequest("GET", fmt.Sprintf("%s/v1/events?index=%d", u, idx-1), nil)
			if tc.accept != "" {
				req.Header.Set("Accept", tc.accept)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if got := resp.Header.Get("Content-Type"); got != tc.contentType {
				t.Fatalf("Content-Type %q, want %q", got, tc.contentType)
			}
			r := bufio.NewReader(resp.Body)
			var ev pluginpb.Event
			if tc.contentType == api.EventStreamProtobuf {
				err = protodelim.UnmarshalFrom(r, &ev)
			} else {
				var line []byte
				if line, err = r.ReadBytes('\n'); err == nil {
					var j struct {
						Index     uint64
						EventType string
						Info      struct{ AllocID string }
					}
					err = json.Unmarshal(line, &j)
					ev.Index, ev.Kind, ev.Info = j.Index, pluginpb.KindOf(api.EventType(j.EventType)), &pluginpb.PluginInfo{AllocId: j.Info.AllocID}
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			if ev.Index != idx || ev.Kind != pluginpb.EventKind_EVENT_KIND_REGISTERED || ev.GetInfo().GetAllocId() != "a1" {
				t.Fatalf("first event %v, want registered a1 at %d", &ev, idx)
			}
		})
	}
}
