package transport

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/plugreg/plugreg/api"
)

// wireCases are every error code of the table with each outcome it may
// carry.
func wireCases() []*api.WireError {
	var out []*api.WireError
	for _, k := range api.ErrorKinds() {
		for _, o := range []api.Outcome{api.NotApplied, api.OutcomeUnknown} {
			out = append(out, &api.WireError{Code: k.Code, Outcome: o, Msg: k.Code + " " + string(o)})
		}
	}
	return out
}

// same reports whether got is the error want was, as a caller sees it:
// its code, its outcome (a refusal's is always not applied), its message.
func same(t *testing.T, wire string, want *api.WireError, got error) {
	t.Helper()
	if api.ErrorCode(got) != want.Code || got.Error() != want.Err().Error() {
		t.Errorf("%s: %s/%s came back as %q (code %q)", wire, want.Code, want.Outcome, got, api.ErrorCode(got))
		return
	}
	var coded api.Coded
	if errors.As(got, &coded) && coded.Outcome() != want.Outcome {
		t.Errorf("%s: %s/%s came back with outcome %s", wire, want.Code, want.Outcome, coded.Outcome())
	}
}

// Every code with each outcome crosses an RPC's status and a stream's end
// as it was sent: before, the outcome was recomputed from the code on the
// far side, so a leader's not-applied timeout reached a follower as
// unknown, and the follower did not retry it.
func TestErrorsCrossEveryWire(t *testing.T) {
	cases := wireCases()
	byMsg := map[string]*api.WireError{}
	for _, c := range cases {
		byMsg[c.Msg] = c
	}
	h := func(_ context.Context, method string, dec func(interface{}) error) (interface{}, error) {
		var msg string
		if err := dec(&msg); err != nil {
			return nil, err
		}
		w := byMsg[msg]
		if method == "Stream" {
			return Streamer(func(ctx context.Context, send func(interface{}) error) error {
				send("first")
				return api.ToWire(w.Err()) // the error as a handler holds it
			}), nil
		}
		return nil, api.ToWire(w.Err())
	}
	m, err := Listen("127.0.0.1:0", ServeRPC(context.Background(), h, ServeOptions{}), hclog.NewNullLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p := NewPool("127.0.0.1", time.Second, nil)
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	back := func(err error) error {
		var w *api.WireError
		if !errors.As(err, &w) {
			t.Fatalf("not a remote error: %v", err)
		}
		return CallError(err, api.CodeNoServer)
	}
	for _, w := range cases {
		var reply interface{}
		same(t, "rpc status", w, back(p.Call(ctx, m.Addr().String(), "Call", w.Msg, &reply)))
		s, err := p.Stream(ctx, m.Addr().String(), "Stream", w.Msg)
		if err != nil {
			t.Fatal(err)
		}
		var first string
		if err := s.Recv(&first); err != nil {
			t.Fatal(err)
		}
		same(t, "stream end", w, back(s.Recv(&first)))
		s.Close()
	}
}

// The status and a stream's end frame carry api.WireError inline: on the
// wire they are the maps of named fields they were when each spelled out
// Code, Outcome and Msg, so older peers read them, and they read older
// peers'.
func TestStatusDecodesBothWays(t *testing.T) {
	type oldStatus struct {
		Code    string
		Outcome string `codec:",omitempty"`
		Msg     string
		Closing bool `codec:",omitempty"`
	}
	type oldFrame struct {
		End     bool   `codec:",omitempty"`
		Code    string `codec:",omitempty"`
		Outcome string `codec:",omitempty"`
		Msg     string `codec:",omitempty"`
	}
	roundTrip := func(in, out interface{}) {
		t.Helper()
		var b []byte
		if err := codec.NewEncoderBytes(&b, msgpackHandle).Encode(in); err != nil {
			t.Fatal(err)
		}
		if err := codec.NewDecoderBytes(b, msgpackHandle).Decode(out); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range append(wireCases(), &api.WireError{}) {
		st := rpcStatus{WireError: *w, Closing: w.Code == api.CodeTooLarge}
		var old oldStatus
		roundTrip(&st, &old)
		if old != (oldStatus{Code: w.Code, Outcome: string(w.Outcome), Msg: w.Msg, Closing: st.Closing}) {
			t.Errorf("status %+v read by an older peer as %+v", st, old)
		}
		var back rpcStatus
		roundTrip(&old, &back)
		if back != st {
			t.Errorf("older peer's status %+v read as %+v", old, back)
		}
		f := streamFrame{End: true, WireError: *w}
		var oldF oldFrame
		roundTrip(&f, &oldF)
		if oldF != (oldFrame{End: true, Code: w.Code, Outcome: string(w.Outcome), Msg: w.Msg}) {
			t.Errorf("end frame %+v read by an older peer as %+v", f, oldF)
		}
		var backF streamFrame
		roundTrip(&oldF, &backF)
		if backF != f {
			t.Errorf("older peer's end frame %+v read as %+v", oldF, backF)
		}
	}
}
