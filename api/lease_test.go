package api

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestValidateTTL(t *testing.T) {
	cases := []struct {
		ttl time.Duration
		ok  bool
	}{
		{0, true},
		{time.Second, true},
		{30 * time.Second, true},
		{24 * time.Hour, true},
		{999 * time.Millisecond, false},
		{24*time.Hour + time.Nanosecond, false},
		{-time.Second, false},
	}
	for _, tc := range cases {
		t.Run(tc.ttl.String(), func(t *testing.T) {
			p := &PluginInfo{Type: "csi", Name: "ebs", AllocID: "a1", ConnectionInfo: &ConnectionInfo{SocketPath: "/s"}, TTL: Duration(tc.ttl)}
			err := ValidatePlugin(p)
			if tc.ok != (err == nil) {
				t.Fatalf("ValidatePlugin: %v (want ok=%v)", err, tc.ok)
			}
			if err != nil && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "TTL")) {
				t.Fatalf("error %q does not name the TTL as invalid", err)
			}
		})
	}
}

// JSON carries a TTL as Go's duration string, and only that: a number
// says nothing of its unit.
func TestDurationJSON(t *testing.T) {
	b, err := json.Marshal(PluginInfo{Type: "t", TTL: Duration(90 * time.Second)})
	if err != nil || !strings.Contains(string(b), `"TTL":"1m30s"`) {
		t.Fatalf("marshal: %s %v", b, err)
	}
	if b, _ := json.Marshal(PluginInfo{Type: "t"}); strings.Contains(string(b), "TTL") {
		t.Fatalf("a zero TTL is written: %s", b)
	}
	cases := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{`"30s"`, 30 * time.Second, true},
		{`"1h2m"`, time.Hour + 2*time.Minute, true},
		{`30`, 0, false},
		{`"thirty"`, 0, false},
		{`null`, 0, true}, // as if absent
	}
	for _, tc := range cases {
		var p PluginInfo
		err := json.Unmarshal([]byte(`{"TTL":`+tc.in+`}`), &p)
		if tc.ok != (err == nil) || time.Duration(p.TTL) != tc.want {
			t.Errorf("%s: TTL %s, error %v", tc.in, p.TTL, err)
		}
	}
}

func TestSameContentSeesTheTTL(t *testing.T) {
	a := &PluginInfo{Type: "t", Name: "n", AllocID: "a", TTL: Duration(time.Minute)}
	b := a.Copy()
	if !SameContent(a, b) {
		t.Fatal("a copy differs")
	}
	b.TTL = Duration(time.Hour)
	if SameContent(a, b) {
		t.Fatal("a new TTL is no change")
	}
}

func TestRenewRequestValidate(t *testing.T) {
	for _, tc := range []struct {
		req RenewRequest
		ok  bool
	}{
		{RenewRequest{Type: "t", Name: "n", AllocID: "a"}, true},
		{RenewRequest{Type: "t", Name: "n", AllocID: "a", IfNodeID: "h1"}, true},
		{RenewRequest{Type: "t", Name: "n"}, false},
		{RenewRequest{Type: "t", Name: "n/x", AllocID: "a"}, false},
	} {
		if err := tc.req.Validate(); tc.ok != (err == nil) {
			t.Errorf("%+v: %v", tc.req, err)
		}
	}
}
