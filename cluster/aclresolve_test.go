package cluster_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/httpapi"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
)

// A server behind the cluster never refuses a token the cluster holds:
// cut off from the leader, it answers a retryable error for a token it
// has not applied yet (acl_not_found ends a client's stream for good),
// and once healed it resolves the token, waiting to catch up if it must.
// A token nobody holds is still refused, on every server.
func TestAReplicaBehindNeverRefusesATokenTheClusterHolds(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.Options{ACL: httpapi.ACLConfig{Enabled: true, DefaultDeny: true}})
	ctx := ctxT(t)
	leader := c.Leader()
	boot, err := leader.Backend().ACLBootstrap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	behind := indexOf(c, c.Followers()[0])
	m := c.Nodes[behind]
	c.Eventually(10*time.Second, "the follower to apply the bootstrap", func() bool {
		_, err := m.Backend().ResolveToken(ctx, boot.SecretID)
		return err == nil
	})
	c.Partition(behind)
	c.Eventually(10*time.Second, "the cut-off follower to lose its leader", func() bool { return m.Leader() == "" })

	created, err := leader.Backend().ACLTokenCreate(ctx, api.ACLTokenCreateRequest{Policies: []api.ACLPolicy{{Kind: api.ACLRead}}})
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	for _, secret := range []string{created.SecretID, "0d1f6a7e-nobody-holds-this-one"} {
		_, err := m.Backend().ResolveToken(short, secret)
		var ce *api.Error
		if errors.Is(err, api.ErrACLNotFound) || !errors.As(err, &ce) || ce.Outcome() != api.NotApplied {
			t.Fatalf("resolving on the cut-off follower: %v, want a retryable cluster error, not a refusal", err)
		}
	}
	if _, err := m.Backend().ResolveToken(short, boot.SecretID); err != nil {
		t.Fatalf("a token the cut-off follower holds: %v, want it resolved without a leader", err)
	}

	c.Heal()
	c.Eventually(20*time.Second, "the healed follower to resolve the new token", func() bool {
		_, err := m.Backend().ResolveToken(ctx, created.SecretID)
		if errors.Is(err, api.ErrACLNotFound) {
			t.Fatalf("the healed follower refused a token the cluster holds: %v", err)
		}
		return err == nil
	})
	for i, n := range c.Nodes {
		if _, err := n.Backend().ResolveToken(ctx, "0d1f6a7e-nobody-holds-this-one"); !errors.Is(err, api.ErrACLNotFound) {
			t.Errorf("node %d: an unknown token: %v, want %v", i, err, api.ErrACLNotFound)
		}
	}
}
