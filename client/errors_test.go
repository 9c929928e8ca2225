package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/backend"
	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/httpapi"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

// refusingRegister is a server's backend whose registrations fail with
// err: most rows of the error table cannot be provoked on demand (an
// unknown command needs an older leader, leadership_lost a deposed one),
// so the test hands each to the HTTP edge as a backend would return it.
type refusingRegister struct {
	backend.Backend
	err error
}

func (b refusingRegister) Register(context.Context, *api.PluginInfo) (api.WriteResult, error) {
	return api.WriteResult{}, b.err
}

// Every row of api's error table reaches a Go client's caller as the server
// decided it: the HTTP status of the row, its code and outcome, and
// errors.Is holds with the row's api sentinel (or errors.As finds an
// api.Coded of its code and outcome). The client kept sentinels of its own
// that errors.Is(err, api.ErrNotFound) did not match, and the HTTP edge
// answered a 404 with no outcome.
func TestEveryErrorReachesTheClientAsTheServerSaidIt(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{})
	real := c.WaitForLeader().Backend()
	type tcase struct {
		name    string
		err     error // what the backend answers
		row     api.ErrorKind
		outcome api.Outcome // what the answer says
	}
	var cases []tcase
	for _, k := range api.ErrorKinds() {
		err := fmt.Errorf("%w: for the test", k.Sentinel)
		switch {
		case k.Code == api.CodeInternal:
			err = errors.New("an error nobody classified")
		case k.Sentinel == nil:
			err = api.NewError(k.Code, errors.New("for the test"))
		}
		cases = append(cases, tcase{k.Code, err, k, k.Outcome})
	}
	// An *api.Error keeps its own outcome: a timeout before the entry
	// was proposed is not applied.
	cases = append(cases, tcase{"timeout not applied", api.NewErrorOutcome(api.CodeTimeout, api.NotApplied, errors.New("before proposing")),
		api.KindOfCode(api.CodeTimeout), api.NotApplied})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := httpapi.New(httpapi.Config{Backend: refusingRegister{Backend: real, err: tc.err}})
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go s.Serve(ln)
			defer s.Close()
			cl, err := client.New(client.Config{Addrs: []string{"http://" + ln.Addr().String()}, RetryWait: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			// The client retries a 503 and a limit's 429 until ctx ends,
			// then returns the last answer with ctx's error.
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			_, err = cl.Register(ctx, plugin("p", "a1"))
			var ae *client.APIError
			if !errors.As(err, &ae) {
				t.Fatalf("got %v, want an *APIError", err)
			}
			if ae.StatusCode != tc.row.Status || ae.Code != tc.row.Code || ae.Outcome != string(tc.outcome) {
				t.Errorf("answered %d %s %q, want %d %s %q", ae.StatusCode, ae.Code, ae.Outcome, tc.row.Status, tc.row.Code, tc.outcome)
			}
			if tc.row.Sentinel != nil && !errors.Is(err, tc.row.Sentinel) {
				t.Errorf("%v: errors.Is(err, %v) does not hold", err, tc.row.Sentinel)
			}
			var coded api.Coded
			if tc.row.Sentinel == nil && (!errors.As(err, &coded) || coded.Code() != tc.row.Code || coded.Outcome() != tc.outcome) {
				t.Errorf("%v: want an api.Coded %s %s", err, tc.row.Code, tc.outcome)
			}
			if code := api.ErrorCode(err); code != tc.row.Code {
				t.Errorf("%v: api.ErrorCode says %q, want %q", err, code, tc.row.Code)
			}
		})
	}
}
