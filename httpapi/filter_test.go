package httpapi_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/httpapi"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

// reg registers csi instance name/alloc on node with options.
func reg(t *testing.T, u, name, alloc, node, opts string) reply {
	t.Helper()
	body := fmt.Sprintf(`{"Type":"csi","Name":%q,"AllocID":%q,"Version":"1.0","NodeID":%q,"ConnectionInfo":{"SocketPath":"/run/x.sock"},"Options":{%s}}`, name, alloc, node, opts)
	r := call(t, "POST", u+"/v1/plugins", body)
	if r.status != 200 {
		t.Fatalf("register %s/%s: %d %s", name, alloc, r.status, r.body)
	}
	return r
}

// allocs is the "Name/AllocID" of each instance of a list answer.
func allocs(t *testing.T, r reply) string {
	t.Helper()
	if r.status != 200 {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	var ps []struct{ Name, AllocID string }
	if err := json.Unmarshal([]byte(r.body), &ps); err != nil {
		t.Fatalf("list %q: %v", r.body, err)
	}
	var out []string
	for _, p := range ps {
		out = append(out, p.Name+"/"+p.AllocID)
	}
	return strings.Join(out, ",")
}

func q(expr string) string { return "filter=" + url.QueryEscape(expr) }

func TestListFilters(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	l, f := c.Leader().HTTPURL, c.Followers()[0].HTTPURL
	reg(t, l, "ebs", "a1", "n1", `"zone":"eu-1"`)
	reg(t, l, "ebs", "a2", "n2", `"zone":"eu-2"`) // ebs's newest
	reg(t, l, "nfs", "b1", "n1", `"zone":"eu-1","tier":"gold"`)
	w := reg(t, l, "gcs", "c1", "n2", ``)
	idx := w.header.Get("X-Plugreg-Index")

	for _, tc := range []struct{ name, path, want string }{
		{"no filter", "/v1/plugins/csi", "ebs/a2,gcs/c1,nfs/b1"},
		{"string equality", "/v1/plugins/csi?" + q(`Name == "nfs"`), "nfs/b1"},
		{"in: substring", "/v1/plugins/csi?" + q(`"s" in Name`), "ebs/a2,gcs/c1,nfs/b1"},
		{"contains", "/v1/plugins/csi?" + q(`Name contains "f"`), "nfs/b1"},
		{"matches", "/v1/plugins/csi?" + q(`AllocID matches "^[ab]"`), "ebs/a2,nfs/b1"},
		{"option key", "/v1/plugins/csi?" + q(`Options.zone == "eu-1"`), "nfs/b1"},
		{"option present", "/v1/plugins/csi?" + q(`tier in Options`), "nfs/b1"},
		{"no options", "/v1/plugins/csi?" + q(`Options is empty`), "gcs/c1"},
		{"numeric index", "/v1/plugins/csi?" + q(`ModifyIndex == `+idx), "gcs/c1"},
		{"nothing matches", "/v1/plugins/csi?" + q(`Name == "zz"`), ""},
		{"instances", "/v1/plugins/csi/ebs?" + q(`NodeID == "n1"`), "ebs/a1"},
		{"node", "/v1/nodes/n1/plugins?" + q(`Options.zone != "eu-1"`), ""},
		{"node, either", "/v1/nodes/n2/plugins?" + q(`Name == "ebs" or Name == "gcs"`), "ebs/a2,gcs/c1"},
		{"stale", "/v1/plugins/csi?consistency=stale&" + q(`Options.zone == "eu-2"`), "ebs/a2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := allocs(t, call(t, "GET", f+tc.path, "")); got != tc.want {
				t.Errorf("%s: got %q, want %q", tc.path, got, tc.want)
			}
		})
	}
	// The list cache holds whole lists only: at one index, a filtered
	// answer is not served for a plain request, nor the reverse.
	for _, tc := range []struct{ path, want string }{
		{"/v1/plugins/csi", "ebs/a2,gcs/c1,nfs/b1"},
		{"/v1/plugins/csi?" + q(`Name == "gcs"`), "gcs/c1"},
		{"/v1/plugins/csi", "ebs/a2,gcs/c1,nfs/b1"},
		{"/v1/plugins/csi?" + q(`Name == "ebs"`), "ebs/a2"},
	} {
		if got := allocs(t, call(t, "GET", f+tc.path, "")); got != tc.want {
			t.Errorf("%s after the others: got %q, want %q", tc.path, got, tc.want)
		}
	}
}

func TestBadFilterIs400WithItsPosition(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{})
	u := c.Leader().HTTPURL
	for _, tc := range []struct{ path, want string }{
		{"/v1/plugins/csi?" + q(`Name ==`), `filter: 1:8 (7): no match found`},
		{"/v1/plugins/csi/ebs?" + q(`Name == "a" andd Type == "b"`), `filter: 1:16 (15)`},
		{"/v1/nodes/n1/plugins?" + q(`Nmae == "a"`), `unknown field \"Nmae\"`},
		{"/v1/plugins/csi?index=1&wait=10s&" + q(`Version matches "("`), `missing closing )`},
		{"/v1/events?" + q(`(Name == "a"`), `filter: 1:`},
		{"/v1/plugins/csi?per_page=0", `per_page \"0\": want 1 to 1000`},
		{"/v1/plugins/csi?per_page=x", `per_page`},
		{"/v1/plugins/csi?" + q(strings.Repeat("(", 300)), `filter: `},
	} {
		// Bounded: a stream or a blocking query that took the bad
		// filter would answer 200 and go on (a blocking query must be
		// refused before it waits).
		hc := &http.Client{Timeout: 5 * time.Second}
		resp, err := hc.Get(u + tc.path)
		if err != nil {
			t.Errorf("%s: %v, want 400 at once", tc.path, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var eb httpapi.ErrorBody
		json.Unmarshal(body, &eb)
		if resp.StatusCode != 400 || eb.Code != "invalid" || !strings.Contains(string(body), tc.want) {
			t.Errorf("%s: %d %s, want 400 invalid with %q", tc.path, resp.StatusCode, body, tc.want)
		}
	}
	r := call(t, "GET", u+"/v1/plugins/csi?"+q(strings.Repeat(" ", 5000)+`Name == "a"`), "")
	if r.status != 413 || !strings.Contains(r.body, "at most 4096") {
		t.Errorf("long filter: %d %s", r.status, r.body)
	}
}

func TestBlockingQueryWithFilter(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{})
	f, l := c.Followers()[0].HTTPURL, c.Leader().HTTPURL
	idx := reg(t, l, "ebs", "a1", "n1", `"zone":"eu-1"`).header.Get("X-Plugreg-Index")
	done := make(chan reply, 1)
	go func() {
		done <- call(t, "GET", f+"/v1/plugins/csi?index="+idx+"&wait=20s&"+q(`Options.zone == "eu-2"`), "")
	}()
	// The query wakes on the type's index, and answers the filtered list.
	w := reg(t, l, "nfs", "b1", "n2", `"zone":"eu-2"`)
	select {
	case r := <-done:
		if got := allocs(t, r); got != "nfs/b1" || r.header.Get("X-Plugreg-Index") != w.header.Get("X-Plugreg-Index") {
			t.Fatalf("blocking filtered query: %q at %s, want nfs/b1 at %s", got, r.header.Get("X-Plugreg-Index"), w.header.Get("X-Plugreg-Index"))
		}
	case <-time.After(20 * time.Second):
		t.Fatal("blocking filtered query did not return after the write")
	}
}

func TestListPaging(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{})
	u := c.Leader().HTTPURL
	for _, n := range []string{"a", "b", "c", "d", "e", "f"} {
		reg(t, u, n, "x1", "n1", `"zone":"eu-1"`)
	}
	reg(t, u, "bb", "x1", "n1", `"zone":"eu-2"`) // filtered out
	page := func(path string) (string, string) {
		r := call(t, "GET", u+path, "")
		return allocs(t, r), r.header.Get("X-Plugreg-NextToken")
	}
	flt := "&" + q(`Options.zone == "eu-1"`)
	got, next := page("/v1/plugins/csi?per_page=2" + flt)
	if got != "a/x1,b/x1" || next != "c" {
		t.Fatalf("page 1: %q next %q", got, next)
	}
	// A write between pages: a name before the token does not shift the
	// next page; the token's own instance removed, the page starts at the
	// next one in order.
	reg(t, u, "aa", "x1", "n1", `"zone":"eu-1"`)
	call(t, "DELETE", u+"/v1/plugins/csi/c/x1", "")
	got, next = page("/v1/plugins/csi?per_page=2&next_token=" + next + flt)
	if got != "d/x1,e/x1" || next != "f" {
		t.Fatalf("page 2: %q next %q", got, next)
	}
	got, next = page("/v1/plugins/csi?per_page=2&next_token=" + next + flt)
	if got != "f/x1" || next != "" {
		t.Fatalf("last page: %q next %q", got, next)
	}
	// A node's list pages by (type, name, alloc); a name's by recency.
	got, next = page("/v1/nodes/n1/plugins?per_page=3")
	if got != "a/x1,aa/x1,b/x1" || next != "csi/bb/x1" {
		t.Fatalf("node page 1: %q next %q", got, next)
	}
	if got, _ = page("/v1/nodes/n1/plugins?per_page=3&next_token=" + url.QueryEscape(next)); got != "bb/x1,d/x1,e/x1" {
		t.Fatalf("node page 2: %q", got)
	}
	reg(t, u, "d", "x2", "n1", ``)
	reg(t, u, "d", "x3", "n1", ``)
	got, next = page("/v1/plugins/csi/d?per_page=2")
	if got != "d/x3,d/x2" || next == "" {
		t.Fatalf("recency page 1: %q next %q", got, next)
	}
	if got, _ = page("/v1/plugins/csi/d?per_page=2&next_token=" + next); got != "d/x1" {
		t.Fatalf("recency page 2: %q", got)
	}
	if r := call(t, "GET", u+"/v1/plugins/csi?next_token=a/b", ""); r.status != 400 {
		t.Fatalf("a node token on a type's list: %d %s", r.status, r.body)
	}
}

// readEvents reads n change events (and any resets, by their instances)
// from a stream, skipping heartbeats.
func readEvents(t *testing.T, u string, n int) []string {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("%s: %d", u, resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	var got []string
	for len(got) < n && sc.Scan() {
		var ev struct {
			EventType string
			Info      *struct{ Name, AllocID string }
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("bad line %q: %v", sc.Text(), err)
		}
		if ev.EventType != "heartbeat" {
			got = append(got, ev.EventType+" "+ev.Info.Name+"/"+ev.Info.AllocID)
		}
	}
	return got
}

func TestEventsFilter(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{Heartbeat: 100 * time.Millisecond})
	l := c.Leader().HTTPURL
	cn := c.AddClient(nil)
	c.Eventually(20*time.Second, "the client agent to reach a server", func() bool {
		return call(t, "GET", cn.HTTPURL+"/v1/health", "").status == 200
	})
	start := reg(t, l, "zero", "z", "n0", ``).header.Get("X-Plugreg-Index")
	reg(t, l, "ebs", "a1", "n1", `"zone":"eu-1"`)
	reg(t, l, "nfs", "b1", "n2", `"zone":"eu-2"`)
	call(t, "DELETE", l+"/v1/plugins/csi/ebs/a1", "")
	reg(t, l, "nfs", "b2", "n1", `"zone":"eu-2"`)
	want := "registered nfs/b1,registered nfs/b2"
	for _, u := range []string{c.Followers()[0].HTTPURL, cn.HTTPURL} {
		// A filtered and an unfiltered stream of the client agent share
		// its upstream; each gets its own events.
		got := readEvents(t, u+"/v1/events?type=csi&index="+start+"&"+q(`Options.zone == "eu-2"`), 2)
		if strings.Join(got, ",") != want {
			t.Errorf("%s filtered: %v, want %s", u, got, want)
		}
		got = readEvents(t, u+"/v1/events?type=csi&index="+start, 4)
		if len(got) != 4 || got[1] != "registered nfs/b1" || got[2] != "deregistered ebs/a1" {
			t.Errorf("%s unfiltered: %v", u, got)
		}
	}
}
