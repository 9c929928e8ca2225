package main

import (
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

// `plugreg watch` run with a token that is then deleted stops with the
// refusal (an error, so a non-zero exit) instead of watching on, or
// retrying for good. In process, on a real one-server cluster.
func TestWatchEndsWithItsToken(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.Options{ACL: httpapi.ACLConfig{Enabled: true, DefaultDeny: true}})
	n := c.Leader()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var boot api.ACLTokenSecret
	if err := putJSON(ctx, n.HTTPURL+"/v1/acl/bootstrap", "", "", &boot); err != nil {
		t.Fatal(err)
	}
	root, err := client.New(client.Config{Addrs: []string{n.HTTPURL}, Token: boot.SecretID})
	if err != nil {
		t.Fatal(err)
	}
	var read api.ACLTokenSecret
	if err := putJSON(ctx, n.HTTPURL+"/v1/acl/token", boot.SecretID, `{"Policies":[{"Kind":"read","Types":["device"]}]}`, &read); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- runWatch([]string{"-addr", n.HTTPURL, "-token", read.SecretID, "-timeout", "50s", "device"})
	}()
	c.Eventually(20*time.Second, "the watch's stream to open", func() bool { return n.Hub().Watchers() > 0 })
	if _, err := root.ACLTokenDelete(ctx, read.AccessorID); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, api.ErrACLNotFound) {
			t.Fatalf("watch returned %v, want the token's refusal", err)
		}
	case <-ctx.Done():
		t.Fatal("watch went on after its token was deleted")
	}
}

func putJSON(ctx context.Context, url, token, body string, out any) error {
	req, _ := http.NewRequestWithContext(ctx, "PUT", url, strings.NewReader(body))
	if token != "" {
		req.Header.Set("X-Plugreg-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return errors.New("PUT " + url + ": " + resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}
