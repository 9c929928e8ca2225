package transport

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/plugreg/plugreg/api"
)

// wireCases are every error code with each outcome it may carry.
func wireCases() []*api.WireError {
	var out []*api.WireError
	for _, code := range []string{api.CodeInvalid, api.CodeTooLarge, api.CodeNotFound, api.CodeConflict, api.CodeMalformed,
		api.CodeUnknownCommand, api.CodeUnsupported, api.CodePermissionDenied, api.CodeACLNotFound, api.CodeACLBootstrapped,
		api.CodeTooManyRequests, api.CodeNoLeader, api.CodeEnqueueTimeout, api.CodeNotLeader, api.CodeNotReady, api.CodeStarting,
		api.CodeNoServer, api.CodeLeadershipLost, api.CodeShutdown, api.CodeForwardFailed, api.CodeTimeout, api.CodeInternal} {
		for _, o := range []api.Outcome{api.NotApplied, api.OutcomeUnknown} {
			out = append(out, &api.WireError{Code: code, Outcome: o, Msg: code + " " + string(o)})
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
		var re *RemoteError
		if !errors.As(err, &re) {
			t.Fatalf("not a remote error: %v", err)
		}
		return (&api.WireError{Code: re.Code, Outcome: api.Outcome(re.Outcome), Msg: re.Msg}).Err()
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
