package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/httpapi"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

// A stream its token may not open stops at once with the refusal, which
// says which one it is; it is not retried on node after node (every node
// refuses a token alike). An open stream whose token is deleted ends
// with the deletion (ErrACLNotFound).
func TestStreamStopsOnARefusedToken(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{ACL: httpapi.ACLConfig{Enabled: true, DefaultDeny: true}})
	var addrs []string
	for _, n := range c.Nodes {
		addrs = append(addrs, n.HTTPURL)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	anon, err := client.New(client.Config{Addrs: addrs})
	if err != nil {
		t.Fatal(err)
	}
	boot, err := anon.ACLBootstrap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	root, _ := client.New(client.Config{Addrs: addrs, Token: boot.SecretID})
	csi, err := root.ACLTokenCreate(ctx, "csi reader", []api.ACLPolicy{{Kind: api.ACLRead, Types: []string{"csi"}}})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, token string
		notFound    bool // the error matches ErrACLNotFound too
	}{
		{"a token that may not read the type", csi.SecretID, false},
		{"an unknown token", "no-such-token", true},
	}
	t.Run("a token deleted while its stream is open", func(t *testing.T) {
		tok, err := root.ACLTokenCreate(ctx, "csi reader, deleted", []api.ACLPolicy{{Kind: api.ACLRead, Types: []string{"csi"}}})
		if err != nil {
			t.Fatal(err)
		}
		cl, _ := client.New(client.Config{Addrs: addrs, Token: tok.SecretID})
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		s := cl.Stream(sctx, 0, client.WatchOptions{Types: []string{"csi"}, Heartbeats: true})
		if _, ok := <-s.Events(); !ok {
			t.Fatalf("the stream ended before its token was deleted: %v", s.Err())
		}
		if _, err := root.ACLTokenDelete(ctx, tok.AccessorID); err != nil {
			t.Fatal(err)
		}
		for range s.Events() {
		}
		if sctx.Err() != nil {
			t.Fatal("the stream of a deleted token went on until its context ended")
		}
		if err := s.Err(); !errors.Is(err, api.ErrACLNotFound) {
			t.Fatalf("Err: %v; want the deletion (ErrACLNotFound)", err)
		}
	})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cl, _ := client.New(client.Config{Addrs: addrs, Token: tc.token})
			sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			s := cl.Stream(sctx, 0, client.WatchOptions{Types: []string{"device"}})
			for range s.Events() {
			}
			if sctx.Err() != nil {
				t.Fatal("the refused stream was retried until its context ended")
			}
			err := s.Err()
			if !errors.Is(err, api.ErrPermissionDenied) || errors.Is(err, api.ErrACLNotFound) != tc.notFound {
				t.Fatalf("Err: %v", err)
			}
		})
	}
}
