package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/httpapi"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

// ending waits for the end of a stream or blocking query and returns an
// error unless it ended as a deleted token's should.
type ending func() error

// endsWithin bounds how long a deleted token's stream or blocking query
// may go on: a server re-checks at the ACL change, a client agent within
// its token cache's lifetime (10 s) and its re-check period. It is a
// bound for a failing test, not a measure: without the re-check they go
// on for minutes.
const endsWithin = 40 * time.Second

// A deleted token ends what runs as it, on a server and through a client
// agent: an event stream (JSON lines, read raw) ends with an error event
// coded acl_not_found; the Go client's stream (protobuf) stops with
// api.ErrACLNotFound and does not resume elsewhere; a blocking query
// answers 403 acl_not_found. Tokens cannot be narrowed in place (only
// created and deleted), so deletion is the change there is to make.
func TestDeletedTokenEndsStreams(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{Heartbeat: 200 * time.Millisecond, ACL: httpapi.ACLConfig{Enabled: true, DefaultDeny: true}})
	cn := c.AddClient(nil)
	c.Eventually(20*time.Second, "the agent to know the servers", func() bool { return len(cn.Servers()) == 3 })
	leader := c.Leader().HTTPURL
	r := call(t, "PUT", leader+"/v1/acl/bootstrap", "")
	var boot struct{ SecretID string }
	if err := json.Unmarshal([]byte(r.body), &boot); r.status != 200 || err != nil {
		t.Fatalf("bootstrap: %d %s", r.status, r.body)
	}
	root := boot.SecretID
	if r := call(t, "POST", leader+"/v1/plugins", plug("device", "gpu", "g1"), "X-Plugreg-Token", root); r.status != 200 {
		t.Fatalf("write: %d %s", r.status, r.body)
	}

	kinds := []struct {
		name  string
		start func(t *testing.T, ctx context.Context, url, secret string) ending
	}{
		{"event stream, JSON, all types", func(t *testing.T, ctx context.Context, url, secret string) ending {
			return jsonStream(t, ctx, url+"/v1/events", secret)
		}},
		{"event stream, JSON, one type", func(t *testing.T, ctx context.Context, url, secret string) ending {
			return jsonStream(t, ctx, url+"/v1/events?type=device", secret)
		}},
		{"Go client stream", func(t *testing.T, ctx context.Context, url, secret string) ending {
			return goClientStream(t, ctx, url, secret)
		}},
		{"blocking query", func(t *testing.T, ctx context.Context, url, secret string) ending {
			return blockingQuery(t, ctx, url, secret)
		}},
	}
	where := []struct {
		name string
		url  string
	}{
		{"server", c.Followers()[0].HTTPURL},
		{"client agent", cn.HTTPURL},
	}
	for _, w := range where {
		for _, k := range kinds {
			t.Run(w.name+"/"+k.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), endsWithin)
				defer cancel()
				secret, accessor := secretOf(t, leader, root, `[{"Kind":"read","Types":["device"]}]`)
				// Through the agent too, the token must work before it is
				// deleted (and be in the agent's cache).
				c.Eventually(10*time.Second, "the token to be known where it is used", func() bool {
					return call(t, "GET", w.url+"/v1/plugins/device", "", "X-Plugreg-Token", secret).status == 200
				})
				ended := k.start(t, ctx, w.url, secret)
				if r := call(t, "DELETE", leader+"/v1/acl/token/"+accessor, "", "X-Plugreg-Token", root); r.status != 200 {
					t.Fatalf("delete token: %d %s", r.status, r.body)
				}
				if err := ended(); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// jsonStream opens a JSON event stream; it ends as it should with an
// error event coded acl_not_found, its last line.
func jsonStream(t *testing.T, ctx context.Context, url, secret string) ending {
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	req.Header.Set("X-Plugreg-Token", secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		resp.Body.Close()
		t.Fatalf("open %s: %d", url, resp.StatusCode)
	}
	return func() error {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		var last httpapi.EventJSON
		for sc.Scan() {
			last = httpapi.EventJSON{}
			if err := json.Unmarshal(sc.Bytes(), &last); err != nil {
				return err
			}
		}
		if ctx.Err() != nil {
			return errors.New("the stream went on after its token was deleted")
		}
		if last.EventType != api.EventError || last.Error == nil || last.Error.Code != api.CodeACLNotFound {
			return errors.New("the stream ended without an acl_not_found error event: last " + string(last.EventType))
		}
		return nil
	}
}

// goClientStream runs the Go client's stream: it ends as it should with
// Err matching api.ErrACLNotFound, its events closed.
func goClientStream(t *testing.T, ctx context.Context, url, secret string) ending {
	cl, err := client.New(client.Config{Addrs: []string{url}, Token: secret})
	if err != nil {
		t.Fatal(err)
	}
	s := cl.Stream(ctx, 0, client.WatchOptions{Types: []string{"device"}, Heartbeats: true})
	// A heartbeat says the stream is open before the token goes.
	select {
	case <-s.Events():
	case <-ctx.Done():
		t.Fatal("no event from the stream")
	}
	return func() error {
		for range s.Events() {
		}
		if ctx.Err() != nil {
			return errors.New("the stream went on after its token was deleted")
		}
		if err := s.Err(); !errors.Is(err, api.ErrACLNotFound) || !errors.Is(err, api.ErrPermissionDenied) {
			return errors.New("Err: want ErrACLNotFound, got " + errString(err))
		}
		return nil
	}
}

// blockingQuery waits on the device list (up to 5 minutes); it ends as it
// should with 403 acl_not_found.
func blockingQuery(t *testing.T, ctx context.Context, url, secret string) ending {
	r := call(t, "GET", url+"/v1/plugins/device", "", "X-Plugreg-Token", secret)
	idx := r.header.Get("X-Plugreg-Index")
	done := make(chan reply, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "GET", url+"/v1/plugins/device?index="+idx+"&wait=5m", nil)
		req.Header.Set("X-Plugreg-Token", secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- reply{}
			return
		}
		defer resp.Body.Close()
		var b strings.Builder
		bufio.NewReader(resp.Body).WriteTo(&b)
		done <- reply{resp.StatusCode, resp.Header, b.String()}
	}()
	// The query is waiting before the token goes: give the request time
	// to arrive (a query that arrives after the deletion is refused
	// anyway, so this only makes the test mean more).
	time.Sleep(300 * time.Millisecond)
	return func() error {
		r := <-done
		if r.status == 0 {
			return errors.New("the blocking query went on after its token was deleted")
		}
		if r.status != 403 || !strings.Contains(r.body, `"acl_not_found"`) {
			return errors.New("blocking query: " + r.body)
		}
		return nil
	}
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}
