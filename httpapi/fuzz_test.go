package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"testing"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/api/pluginpb"
	"github.com/plugreg/plugreg/fsm"
	"github.com/plugreg/plugreg/gossip"
)

// Whatever the body, JSON or protobuf, decodePlugin either refuses it with
// a 4xx, or returns a plugin that encodes as a log entry (in either of its
// encodings) and decodes back the same: nothing it lets through can be
// refused later, by the leader or by the FSM on any server.
func FuzzDecodePlugin(f *testing.F) {
	for _, body := range []string{
		`{"Type":"csi","Name":"ebs","AllocID":"a1","Version":"1","NodeID":"n1","ConnectionInfo":{"SocketPath":"/run/ebs.sock"},"Options":{"k":"v"}}`,
		`{"Type":"csi","Name":"e/bs","AllocID":"a1","ConnectionInfo":{"Address":"10.0.0.1:9"}}`,
		`{"Type":"","Name":"x","AllocID":"a"}`,
		`{"Type":"t","Name":"n","AllocID":"a","ConnectionInfo":{"SocketPath":"/s"},"CreateIndex":5}{}`,
		`{"Type":"t\u0000","Name":"n","AllocID":"a","ConnectionInfo":{"SocketPath":"/s"},"Extra":1}`,
		`{"Type":"t","Name":"n","AllocID":"a","ConnectionInfo":{"SocketPath":"/s"},"TTL":"30s","Health":{"Status":"suspect","Check":"probe"}}`,
		`[]`,
	} {
		f.Add(false, []byte(body))
		var p api.PluginInfo
		if json.Unmarshal([]byte(body), &p) == nil {
			b, _ := pluginpb.FromPlugin(&p).MarshalVT()
			f.Add(true, b)
		}
	}
	f.Fuzz(func(t *testing.T, proto bool, body []byte) {
		r := httptest.NewRequest(http.MethodPost, "/v1/plugins", bytes.NewReader(body))
		if proto {
			r.Header.Set("Content-Type", api.PluginProtobuf)
		}
		p, err := decodePlugin(r)
		if err != nil {
			if status, _ := classify(err); status < 400 || status >= 500 {
				t.Fatalf("refusal %v answered %d, want a 4xx", err, status)
			}
			return
		}
		for _, enc := range []fsm.Encoding{fsm.Msgpack, fsm.Protobuf} {
			cmd, err := fsm.EncodeCommandIn(&fsm.RegisterRequest{Plugin: p}, enc)
			if err != nil {
				t.Fatalf("accepted at the edge, refused by the log's encoder: %v", err)
			}
			req, err := fsm.DecodeCommand(cmd)
			if err != nil {
				t.Fatalf("accepted at the edge, refused by the FSM's decoder: %v", err)
			}
			got := req.(*fsm.RegisterRequest).Plugin
			if !reflect.DeepEqual(got, p) && !(len(got.Options) == 0 && len(p.Options) == 0) {
				t.Fatalf("the log (%v) changes the plugin:\n%+v\n%+v", enc, p, got)
			}
		}
	})
}

// Whatever the body, decodeTokenCreate refuses with a 4xx or returns
// policies that the FSM accepts.
func FuzzDecodeTokenCreate(f *testing.F) {
	f.Add([]byte(`{"Description":"d","Policies":[{"Kind":"write","Types":["csi-*","device"]}]}`))
	f.Add([]byte(`{"Policies":[{"Kind":"operator"}]}`))
	f.Add([]byte(`{"Policies":[{"Kind":"read","Types":["a*b"]}]}`))
	f.Add([]byte(`{"Policies":[]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeTokenCreate(bytes.NewReader(body))
		if err != nil {
			if status, _ := classify(err); status < 400 || status >= 500 {
				t.Fatalf("refusal %v answered %d, want a 4xx", err, status)
			}
			return
		}
		tok := fsm.ACLToken{AccessorID: "a", SecretHash: api.HashSecret("s"), Description: req.Description, Policies: req.Policies}
		if _, err := fsm.EncodeCommand(&fsm.ACLTokenSetRequest{Token: tok}); err != nil {
			t.Fatalf("accepted at the edge, refused by the log's encoder: %v", err)
		}
	})
}

// Whatever the query string, a read's parameters parse or are refused
// with a 400.
func FuzzParseQuery(f *testing.F) {
	f.Add("consistency=stale&index=5&wait=30s")
	f.Add("index=-1")
	f.Add("wait=1h&stale")
	f.Add("consistency=%zz")
	f.Fuzz(func(t *testing.T, raw string) {
		r := &http.Request{URL: &url.URL{RawQuery: raw}}
		var q api.Query
		if err := parseQuery(r, &q); err != nil {
			if status, _ := classify(err); status != http.StatusBadRequest {
				t.Fatalf("refusal %v answered %d, want 400", err, status)
			}
			return
		}
		if q.Wait < 0 || q.Wait > maxWait {
			t.Fatalf("wait %v outside 0..%v", q.Wait, maxWait)
		}
	})
}

// Whatever the body, decodeKeyringRequest refuses with a 4xx or returns a
// key that the keyring then accepts or refuses with a 400.
func FuzzDecodeKeyringRequest(f *testing.F) {
	f.Add([]byte(`{"Key":"pUqJrVyVRj5jsiYEkM/tFQYfWyJIv4s3XkvDwy7Cu5s="}`))
	f.Add([]byte(`{"Key":"c2hvcnQ="}`))
	f.Add([]byte(`{"Key":""}`))
	f.Add([]byte(`{"Key":"x","Extra":1}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		key, err := decodeKeyringRequest(bytes.NewReader(body))
		if err != nil {
			if status, _ := classify(err); status < 400 || status >= 500 {
				t.Fatalf("refusal %v answered %d, want a 4xx", err, status)
			}
			return
		}
		if key == "" {
			t.Fatal("accepted an empty key")
		}
		if _, err := gossip.ParseKey(key); err != nil {
			if status, _ := classify(err); status != http.StatusBadRequest {
				t.Fatalf("key refusal %v answered %d, want 400", err, status)
			}
		}
	})
}
