package cluster_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/cluster"
	"github.com/plugreg/plugreg/httpapi"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

// With an initial management token (as the Helm chart hands every server
// one), the first leader bootstraps ACLs with it: the secret is an
// operator token, the one token there is. A later leader finds the
// cluster bootstrapped and makes no second one, and plugreg acl bootstrap
// is refused as for any bootstrapped cluster.
func TestInitialManagementTokenBootstrapsOnce(t *testing.T) {
	const secret = "4e2f8a1c-initial-management-secret"
	c := testcluster.New(t, 3, testcluster.Options{
		ACL:    httpapi.ACLConfig{Enabled: true, DefaultDeny: true},
		Modify: func(_ int, cfg *cluster.Config) { cfg.ACLInitialManagementToken = secret },
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	with := func(n *testcluster.Node, tok string) *client.Client {
		cl, err := client.New(client.Config{Addrs: []string{n.HTTPURL}, Token: tok})
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	var first []api.ACLToken
	c.Eventually(20*time.Second, "the initial token to be an operator token", func() bool {
		var err error
		first, err = with(c.Nodes[1], secret).ACLTokens(ctx) // an operator call
		return err == nil
	})
	if len(first) != 1 || first[0].Policies[0].Kind != api.ACLOperator {
		t.Fatalf("tokens %+v: want the one initial operator token", first)
	}
	if _, err := with(c.Nodes[0], "").ACLBootstrap(ctx); !errors.Is(err, api.ErrACLBootstrapped) {
		t.Fatalf("acl bootstrap after the initial token: %v", err)
	}

	// Leadership moves: the new leader does not bootstrap again.
	old := c.Leader()
	for i, n := range c.Nodes {
		if n == old {
			c.Kill(i)
		}
	}
	leader := c.WaitForLeader()
	c.Eventually(20*time.Second, "the new leader established", func() bool {
		_, err := with(leader, secret).Register(ctx, &api.PluginInfo{Type: "csi", Name: "ebs", AllocID: "a1", ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/e.sock"}})
		return err == nil
	})
	after, err := with(leader, secret).ACLTokens(ctx)
	if err != nil || len(after) != 1 || after[0].AccessorID != first[0].AccessorID {
		t.Fatalf("after a new leader: %+v %v, want the same one token %s", after, err, first[0].AccessorID)
	}
}
