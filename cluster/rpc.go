package cluster

import (
	"context"
	"errors"
	"fmt"

	"github.com/plugreg/plugreg/fsm"
)

// Internal RPC methods served on the server port.
const (
	rpcApply     = "Apply"     // applyArgs -> applyReply; leader only
	rpcReadIndex = "ReadIndex" // {} -> uint64; leader only
	rpcPeers     = "Peers"     // {} -> []string
)

type applyArgs struct {
	Cmd []byte
}

type applyReply struct {
	Index     uint64
	Result    fsm.Result
	Removed   int
	Duplicate bool
	Rejected  string // the FSM rejected the command (deterministically)
}

func (s *Server) handleRPC(ctx context.Context, method string, dec func(interface{}) error) (interface{}, error) {
	switch method {
	case rpcApply:
		var args applyArgs
		if err := dec(&args); err != nil {
			return nil, fmt.Errorf("decode %s: %w", method, err)
		}
		// Validate before proposing: a bad entry must never reach the
		// log, even from a misbehaving peer.
		if _, err := fsm.DecodeCommand(args.Cmd); err != nil {
			return nil, err
		}
		if !s.IsLeader() {
			return nil, notApplied(CodeNotLeader, errors.New("not the leader"))
		}
		res, err := s.applyLocal(ctx, args.Cmd)
		if err != nil {
			return nil, err
		}
		reply := &applyReply{Index: res.Index, Result: res.Result, Removed: res.Removed, Duplicate: res.Duplicate}
		if res.Err != nil {
			reply.Rejected = res.Err.Error()
		}
		return reply, nil
	case rpcReadIndex:
		var none struct{}
		if err := dec(&none); err != nil {
			return nil, err
		}
		return s.readIndexLocal(ctx)
	case rpcPeers:
		var none struct{}
		if err := dec(&none); err != nil {
			return nil, err
		}
		peers, err := s.Peers()
		if err != nil {
			return []string{}, nil
		}
		return peers, nil
	}
	return nil, fmt.Errorf("unknown rpc method %q", method)
}
