package raftx

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// A transport with NoPipelining refuses to pipeline, so raft replicates
// one request at a time (hashicorp/raft issue 612); raft's default
// pipelines.
func TestNoPipeliningRefusesPipelines(t *testing.T) {
	newTrans := func(inFlight int) *raft.NetworkTransport {
		tr, err := raft.NewTCPTransportWithConfig("127.0.0.1:0", nil, &raft.NetworkTransportConfig{
			MaxPool: 1, Timeout: time.Second, Logger: hclog.NewNullLogger(), MaxRPCsInFlight: inFlight,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		return tr
	}
	peer := newTrans(0)
	for _, tc := range []struct {
		inFlight  int
		pipelines bool
	}{
		{NoPipelining, false},
		{0, true}, // raft's default
	} {
		p, err := newTrans(tc.inFlight).AppendEntriesPipeline("peer", peer.LocalAddr())
		if !tc.pipelines {
			if !errors.Is(err, raft.ErrPipelineReplicationNotSupported) {
				t.Fatalf("MaxRPCsInFlight %d: got %v, want %v", tc.inFlight, err, raft.ErrPipelineReplicationNotSupported)
			}
			continue
		}
		if err != nil {
			t.Fatalf("MaxRPCsInFlight %d: %v, want a pipeline", tc.inFlight, err)
		}
		p.Close()
	}
}
