// Package agentrpc is the internal RPC that client agents use to reach
// servers, on the server port (transport's msgpack RPC): its method names
// and argument types. Each method takes the args struct named beside it;
// errors cross as api.WireError. It is not the public wire vocabulary
// (package api): the Go client and the plugin SDK do not import it.
package agentrpc

import (
	"time"

	"github.com/plugreg/plugreg/api"
)

// Methods.
const (
	Register       = "Agent.Register"       // RegisterArgs -> WriteResult
	Deregister     = "Agent.Deregister"     // DeregisterArgs -> WriteResult
	DeregisterNode = "Agent.DeregisterNode" // DeregisterNodeArgs -> WriteResult
	Renew          = "Agent.Renew"          // RenewArgs -> RenewResult
	HostSync       = "Agent.HostSync"       // HostSyncArgs -> HostSyncResult (servers from HostSyncRPCVersion)
	Query          = "Agent.Query"          // Query -> QueryResult
	Subscribe      = "Agent.Subscribe"      // SubscribeArgs -> a stream of Event
	Status         = "Agent.Status"         // struct{} -> StatusReply

	// ACLs, for client agents: tokens are resolved and managed on servers.
	ACLResolve     = "ACL.Resolve"     // ACLResolveArgs -> ACLToken
	ACLBootstrap   = "ACL.Bootstrap"   // struct{} -> ACLTokenSecret
	ACLTokenCreate = "ACL.TokenCreate" // ACLTokenCreateArgs -> ACLTokenSecret
	ACLTokens      = "ACL.Tokens"      // ACLCallerArgs -> []ACLToken
	ACLTokenDelete = "ACL.TokenDelete" // ACLTokenDeleteArgs -> WriteResult

	// Operator calls client agents pass on for their HTTP caller.
	SnapshotSave    = "Operator.SnapshotSave"    // SnapshotSaveArgs -> []byte (the archive)
	SnapshotRestore = "Operator.SnapshotRestore" // SnapshotRestoreArgs -> WriteResult
	AutopilotHealth = "Operator.AutopilotHealth" // ACLCallerArgs -> AutopilotHealth
)

// SnapshotSaveArgs asks for a backup archive (package snapshot) on behalf
// of Token's holder, an operator.
type SnapshotSaveArgs struct {
	Token string
	Stale bool // the answering server's state, without a read barrier
}

// SnapshotRestoreArgs restores an archive on behalf of Token's holder.
type SnapshotRestoreArgs struct {
	Token     string
	Archive   []byte
	RequestID string `codec:",omitempty"`
}

// ACLResolveArgs asks for the token whose secret hashes to SecretHash (the
// secret itself does not travel for a lookup).
type ACLResolveArgs struct{ SecretHash string }

// ACLCallerArgs carries the caller's secret: the server checks it is an
// operator token before it answers.
type ACLCallerArgs struct{ Token string }

// ACLTokenCreateArgs creates a token on behalf of Token's holder.
type ACLTokenCreateArgs struct {
	Token   string
	Request api.ACLTokenCreateRequest
}

// ACLTokenDeleteArgs deletes a token on behalf of Token's holder.
type ACLTokenDeleteArgs struct {
	Token      string
	AccessorID string
	RequestID  string `codec:",omitempty"`
}

// RegisterArgs carries a registration and its request ID.
type RegisterArgs struct {
	Plugin    *api.PluginInfo
	RequestID string `codec:",omitempty"`
	// Token is the writer's ACL secret; servers with ACLs on check it as
	// their HTTP API would (older agents send none).
	Token string `codec:",omitempty"`
}

// DeregisterArgs carries a (possibly conditional) deregistration.
type DeregisterArgs struct {
	Request   api.DeregisterRequest
	RequestID string `codec:",omitempty"`
	Token     string `codec:",omitempty"`
}

// DeregisterNodeArgs carries the removal of a node's instances.
type DeregisterNodeArgs struct {
	NodeID    string
	RequestID string `codec:",omitempty"`
	Token     string `codec:",omitempty"`
}

// HostSyncRPCVersion is the RPCVersion (gossip.Meta) of servers that
// serve HostSync: a client agent sends one only while every server it
// sees alive says so, and its host writes one instance at a time
// otherwise.
const HostSyncRPCVersion = 6

// HostSyncArgs carries a host's anti-entropy writes, as one (see
// api.HostSyncRequest). No request ID: a repeat changes nothing.
type HostSyncArgs struct {
	Request api.HostSyncRequest
	Token   string `codec:",omitempty"`
}

// RenewArgs carries a lease renewal on behalf of Token's holder.
type RenewArgs struct {
	Request api.RenewRequest
	Token   string `codec:",omitempty"`
}

// MinHeartbeat is the shortest heartbeat period a stream may ask for
// (zero asks for none).
const MinHeartbeat = 100 * time.Millisecond

// SubscribeArgs opens an event stream: the events of Types (none: all)
// after *From (nil: from the server's applied index), with a heartbeat
// every Heartbeat (0 or at least MinHeartbeat). The stream's first event
// is a heartbeat at its starting position.
type SubscribeArgs struct {
	Types     []string
	From      *uint64
	Heartbeat time.Duration
}

// StatusReply is a server's view of the Raft cluster.
type StatusReply struct {
	Leader   string // the leader's server address, "" when none is known
	LeaderID string
	Peers    []string
	Voters   []string // node IDs of the voters
}

// Tokened is an args type that carries its caller's token. A client agent
// also sends the token in the request's header
// (transport.WithCallerToken), where the server checks the caller before
// it decodes the args; older servers read it from the args alone.
type Tokened interface{ CallerToken() string }

func (a SnapshotSaveArgs) CallerToken() string    { return a.Token }
func (a SnapshotRestoreArgs) CallerToken() string { return a.Token }
func (a ACLCallerArgs) CallerToken() string       { return a.Token }
func (a ACLTokenCreateArgs) CallerToken() string  { return a.Token }
func (a ACLTokenDeleteArgs) CallerToken() string  { return a.Token }
func (a RegisterArgs) CallerToken() string        { return a.Token }
func (a DeregisterArgs) CallerToken() string      { return a.Token }
func (a DeregisterNodeArgs) CallerToken() string  { return a.Token }
func (a RenewArgs) CallerToken() string           { return a.Token }
func (a HostSyncArgs) CallerToken() string        { return a.Token }

// Write is a Tokened write, recorded in the log under its request ID,
// which the server checks before it does anything.
type Write interface {
	Tokened
	WriteRequestID() string
}

func (a SnapshotRestoreArgs) WriteRequestID() string { return a.RequestID }
func (a RegisterArgs) WriteRequestID() string        { return a.RequestID }
func (a DeregisterArgs) WriteRequestID() string      { return a.RequestID }
func (a DeregisterNodeArgs) WriteRequestID() string  { return a.RequestID }
func (a ACLTokenDeleteArgs) WriteRequestID() string  { return a.RequestID }
