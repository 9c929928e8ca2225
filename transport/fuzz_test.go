package transport

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/plugreg/plugreg/agentrpc"
	"github.com/plugreg/plugreg/api"
)

// argsOf is what the server decodes each method's arguments into: the
// agent RPC's own types, as a hostile peer's bytes meet them.
func argsOf(method string) interface{} {
	switch method {
	case agentrpc.Register:
		return new(agentrpc.RegisterArgs)
	case agentrpc.Deregister:
		return new(agentrpc.DeregisterArgs)
	case agentrpc.DeregisterNode:
		return new(agentrpc.DeregisterNodeArgs)
	case agentrpc.Query:
		return new(api.Query)
	case agentrpc.Subscribe:
		return new(agentrpc.SubscribeArgs)
	case agentrpc.SnapshotRestore:
		return new(agentrpc.SnapshotRestoreArgs)
	case agentrpc.ACLTokenCreate:
		return new(agentrpc.ACLTokenCreateArgs)
	}
	return new(struct{})
}

// FuzzServeRPC feeds the server side of the internal RPC arbitrary bytes,
// as a peer would send them: it must neither panic nor hang, and it ends
// the connection when the peer does.
func FuzzServeRPC(f *testing.F) {
	seed := func(method string, args interface{}) []byte {
		var b bytes.Buffer
		enc := codec.NewEncoder(&b, msgpackHandle)
		enc.Encode(&rpcHeader{Method: method, Timeout: time.Second})
		enc.Encode(args)
		return b.Bytes()
	}
	f.Add(seed(agentrpc.Register, &agentrpc.RegisterArgs{Plugin: &api.PluginInfo{Type: "csi", Name: "a", AllocID: "1", NodeID: "n"}}))
	f.Add(seed(agentrpc.Deregister, &agentrpc.DeregisterArgs{Request: api.DeregisterRequest{Type: "csi", Name: "a", AllocID: "1"}}))
	f.Add(seed(agentrpc.Query, &api.Query{Kind: api.QueryList, Type: "csi"}))
	f.Add(seed(agentrpc.Subscribe, &agentrpc.SubscribeArgs{Types: []string{"csi"}, Heartbeat: time.Second}))
	f.Add(seed(agentrpc.ACLTokenCreate, &agentrpc.ACLTokenCreateArgs{Request: api.ACLTokenCreateRequest{Policies: []api.ACLPolicy{{Kind: api.ACLRead}}}}))
	f.Add(append(seed(agentrpc.Register, &agentrpc.RegisterArgs{}), 0xdb, 0xff, 0xff, 0xff, 0xff)) // a huge string length
	f.Add([]byte{0x81, 0xa6, 'M', 'e', 't', 'h', 'o', 'd', 0xc6, 0x7f, 0xff, 0xff, 0xff})
	handler := func(_ context.Context, method string, dec func(interface{}) error) (interface{}, error) {
		args := argsOf(method)
		if err := dec(args); err != nil {
			return nil, err
		}
		switch a := args.(type) {
		case *agentrpc.RegisterArgs:
			if a.Plugin != nil {
				api.ValidatePlugin(a.Plugin)
			}
		case *agentrpc.DeregisterArgs:
			a.Request.Validate()
		case *api.Query:
			a.Validate()
		case *agentrpc.ACLTokenCreateArgs:
			a.Request.Validate()
		}
		return struct{}{}, nil
	}
	serve := ServeRPC(context.Background(), handler, ServeOptions{IdleTimeout: time.Second,
		MaxRequestBytes: func(string) int64 { return 1 << 20 }})
	f.Fuzz(func(t *testing.T, in []byte) {
		server, peer := net.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			serve(server)
			server.Close()
		}()
		go io.Copy(io.Discard, peer) // the replies
		peer.SetWriteDeadline(time.Now().Add(5 * time.Second))
		peer.Write(in)
		peer.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("the server kept the connection after the peer closed it (%d bytes in)", len(in))
		}
	})
}
