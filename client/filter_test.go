package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

// The client sends Filter, PerPage and NextToken, reads the next token,
// and Watch with a Filter gets only the matching changes.
func TestClientFilterPagingAndWatch(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{Heartbeat: 100 * time.Millisecond})
	cl := newClient(t, c, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start, _ := cl.Register(ctx, plugin("first", "z"))
	for _, n := range []string{"a", "b", "c"} {
		p := plugin(n, "x")
		p.Options = map[string]string{"zone": "eu-" + n}
		if _, err := cl.Register(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	q := &client.QueryOptions{Filter: `Options.zone != "eu-b"`, PerPage: 1}
	for {
		list, meta, err := cl.List(ctx, "csi", q)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range list {
			got = append(got, p.Name)
		}
		if meta.NextToken == "" {
			break
		}
		q.NextToken = meta.NextToken
	}
	if strings.Join(got, ",") != "a,c,first" {
		t.Fatalf("paged filtered list: %v", got)
	}
	_, _, err := cl.List(ctx, "csi", &client.QueryOptions{Filter: `Name = "a"`})
	if !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), "1:6 (5)") {
		t.Fatalf("bad filter: %v", err)
	}
	ch := cl.Watch(ctx, start.Index, client.WatchOptions{Types: []string{"csi"}, Filter: `Options.zone == "eu-c"`})
	ev, ok := <-ch
	if !ok || ev.Info == nil || ev.Info.Name != "c" {
		t.Fatalf("watch delivered %+v (open %v), want the change of c only", ev, ok)
	}
}

// A stream with a filter every node refuses (a bad expression, a field
// that does not exist) ends at once with the refusal, which says what is
// wrong, rather than moving from node to node with it for good.
func TestStreamWithABadFilterEnds(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{Heartbeat: 100 * time.Millisecond})
	cl := newClient(t, c, 0)
	for _, tc := range []struct{ filter, says string }{
		{`Name = "a"`, "1:6"},
		{`Nmae == "a"`, `unknown field "Nmae"`},
	} {
		t.Run(tc.filter, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s := cl.Stream(ctx, 0, client.WatchOptions{Types: []string{"csi"}, Filter: tc.filter})
			for range s.Events() {
			}
			if ctx.Err() != nil || !errors.Is(s.Err(), api.ErrInvalid) || !strings.Contains(s.Err().Error(), tc.says) {
				t.Fatalf("the stream ended with %v (context: %v), want the filter's refusal saying %s", s.Err(), ctx.Err(), tc.says)
			}
		})
	}
}
