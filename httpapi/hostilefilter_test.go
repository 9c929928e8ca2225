package httpapi_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

// alternation is (?:aa|ba|...) of n two-letter words no two neighbours of
// which share a prefix: about three instructions a word.
func alternation(n int) string {
	words := make([]string, n)
	for i := range words {
		words[i] = fmt.Sprintf("%c%c", 'a'+i%26, 'a'+(i/26)%26)
	}
	return "(?:" + strings.Join(words, "|") + ")"
}

// heavy is a pattern just under filter.MaxProgram that fails at its first
// byte on the values registered here: cheap to run, priced in full.
const heavy = `^zzz[a-z]{990}[0-9]{990}`

// eightHeavy is 8 heavy tests of Options.x: 8 x 1,990 x 2 KB is 32
// million steps an instance of these tests, twice filter.MaxWork.
var eightHeavy = strings.TrimSuffix(strings.Repeat(fmt.Sprintf("Options.x matches %q or ", heavy), 8), " or ")

// oneHeavy matches every instance here at its first (cheap) test, and is
// priced for both: 1,990 x 2 KB, 4 million steps an instance.
var oneHeavy = fmt.Sprintf(`Name matches "^h" or Options.x matches %q`, heavy)

// regLong registers n csi instances h0..h(n-1) whose option x is 2 KB.
func regLong(t *testing.T, u string, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		reg(t, u, fmt.Sprintf("h%d", i), "a", "n1", `"x":"`+strings.Repeat("v", 2000)+`"`)
	}
}

// A hostile list filter is refused, at Compile or by its budget, in a
// few MB, through a server and a client agent. Before the bounds, the 2
// KB pattern took 937 MB and minutes of CPU per instance.
func TestHostileListFilterIsRefusedOrBounded(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{})
	l := c.Leader().HTTPURL
	cn := c.AddClient(nil)
	c.Eventually(20*time.Second, "the client agent to reach a server", func() bool {
		return call(t, "GET", cn.HTTPURL+"/v1/health", "").status == 200
	})
	regLong(t, l, 0, 20)
	nine := strings.TrimSuffix(strings.Repeat(`Name matches "h" or `, 9), " or ")
	for node, u := range map[string]string{"server": l, "client agent": cn.HTTPURL} {
		for _, tc := range []struct {
			name, query string
			status      int
			want        string
		}{
			{"the issue's 2 KB pattern", q(fmt.Sprintf("Options.x matches %q", alternation(633)+"{1000}")), 400, "at most 2000"},
			{"the issue's 230-byte pattern", q(fmt.Sprintf("Options.x matches %q", alternation(67)+"{1000}")), 400, "at most 2000"},
			{"more matches tests than allowed", q(nine), 400, "at most 8"},
			{"eight big patterns over 20 long values", q(eightHeavy), 400, "work budget exceeded"},
			// Paged: the page's instance and the next are evaluated, not
			// the list (20 instances of 4 million steps: 5 budgets).
			{"a big pattern over the list", q(oneHeavy), 400, "work budget exceeded"},
			{"a big pattern, one page", q(oneHeavy) + "&per_page=1", 200, `"Name":"h0"`},
			{"a small pattern over the long values", q(`Options.x matches "^v+$" and Name matches "^h1"`), 200, `"Name":"h19"`},
		} {
			t.Run(node+"/"+tc.name, func(t *testing.T) {
				var r reply
				alloc := allocated(func() { r = call(t, "GET", u+"/v1/plugins/csi?"+tc.query, "") })
				if r.status != tc.status || !strings.Contains(r.body, tc.want) {
					t.Fatalf("%s: %d %.300s, want %d with %q", u, r.status, r.body, tc.status, tc.want)
				}
				if r.status == 400 && !strings.Contains(r.body, `"code":"invalid"`) {
					t.Errorf("%s: %s is not an invalid request", u, r.body)
				}
				// The whole process: the cluster's own work is a few MB
				// in the same time; the answer of 20 instances 120 KB.
				t.Logf("%d KB allocated by the process during the request", alloc>>10)
				if alloc > 64<<20 {
					t.Errorf("%s: the request allocated %d MB", u, alloc>>20)
				}
			})
		}
	}
}

func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A stream whose filter runs over its budget ends, and says why in its
// last event (an api.EventError), on a server and on a client agent: its
// first event over long values costs more than a stream may spend at
// once.
func TestHostileStreamFilterEndsWithItsError(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{Heartbeat: 100 * time.Millisecond})
	l := c.Leader().HTTPURL
	cn := c.AddClient(nil)
	c.Eventually(20*time.Second, "the client agent to reach a server", func() bool {
		return call(t, "GET", cn.HTTPURL+"/v1/health", "").status == 200
	})
	for i, u := range []string{l, cn.HTTPURL} {
		t.Run([]string{"server", "client agent"}[i], func(t *testing.T) {
			hc := &http.Client{Timeout: 20 * time.Second}
			resp, err := hc.Get(u + "/v1/events?type=csi&" + q(eightHeavy))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("%d", resp.StatusCode)
			}
			regLong(t, l, 100*i, 2)
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatalf("the stream did not end cleanly: %v", err)
			}
			lines := strings.Split(strings.TrimSpace(string(body)), "\n")
			var last api.Event
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last.EventType != api.EventError ||
				last.Error == nil || last.Error.Code != "invalid" || !strings.Contains(last.Error.Message, "work budget exceeded") {
				t.Fatalf("last event %q (%v), want an invalid error naming the budget", lines[len(lines)-1], err)
			}
		})
	}
}
