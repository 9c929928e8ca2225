package testcluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"github.com/plugreg/plugreg/api"
)

// Register registers p through n as a client would: with a request ID,
// retried while the answer is an availability error (an election, a leader
// that lost its quorum for a moment on a busy machine). The request ID
// makes a retry of a write that did apply answer with the first index,
// so the index returned is the write's own. It fails the test after 30 s.
func (c *Cluster) Register(n *Node, p *api.PluginInfo) api.WriteResult {
	c.t.Helper()
	var b [16]byte
	rand.Read(b[:])
	ctx := api.WithRequestID(context.Background(), hex.EncodeToString(b[:]))
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := n.Backend().Register(ctx, p)
		var coded api.Coded
		switch {
		case err == nil:
			return res
		case !errors.As(err, &coded) || time.Now().After(deadline):
			c.t.Fatalf("register %s/%s/%s through %s: %v", p.Type, p.Name, p.AllocID, n.Config.NodeID, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
