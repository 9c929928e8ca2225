package agent

import (
	"context"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/plugreg/plugreg/agent/fanout"
	"github.com/plugreg/plugreg/agentrpc"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/gossip"
	"github.com/plugreg/plugreg/internal/datadir"
	"github.com/plugreg/plugreg/internal/nodeid"
	"github.com/plugreg/plugreg/tlsutil"
	"github.com/plugreg/plugreg/tracing"
	"github.com/plugreg/plugreg/transport"
	"go.opentelemetry.io/otel/trace"
)

// Config of a client agent.
type Config struct {
	// NodeID names the host in gossip and on every instance the agent
	// registers. It is kept in DataDir: a restart with another ID is
	// refused.
	NodeID  string
	DataDir string // node-id and gossip-peers.json; required
	// BindAddr is the IP gossip listens on and RPC connections come from.
	BindAddr   string
	GossipPort int    // 0 picks a free port
	HTTPAddr   string // advertised in gossip; this package does not serve HTTP
	// Join is a list of gossip addresses (host:port) to join at start;
	// empty: the peers remembered in DataDir.
	Join          []string
	RetryJoin     bool
	RetryInterval time.Duration // zero: 1s
	GossipFast    bool          // memberlist's local-network timing (tests, dev)
	// GossipEncryption encrypts gossip (zero: plaintext).
	GossipEncryption gossip.Encryption
	// RPCTimeout bounds one call to a server (zero: 10s; a blocking
	// query gets its wait on top).
	RPCTimeout time.Duration
	// Events tunes the event fan-out (its Upstream is set here).
	Events fanout.Config
	// TLS, when set, secures the RPC connections to servers by its
	// policy; nil: plaintext.
	TLS *tlsutil.Configurator
	// ACLToken is the agent token: the secret its own writes (the host's
	// plugins) carry to servers that check ACLs.
	ACLToken string
	Logger   hclog.Logger
	// Tracer records a span for each call to a server made for a traced
	// request, whose context the call carries on (nil: tracing off).
	Tracer *tracing.Tracer
	// StaticServers, when set, are the servers' RPC addresses, used
	// instead of gossip (which is not started: Join and the gossip
	// settings are ignored). For the fleet simulator only (static.go).
	StaticServers []string
}

// upstreamHeartbeat is the heartbeat period the agent asks of a server's
// event stream: well under the hub's stall timeout (15 s), so a silent
// stream is a dead one.
const upstreamHeartbeat = 2 * time.Second

// Client is a client agent: a member of the gossip pool that is not a Raft
// voter, and an httpapi.Backend that serves every request through a
// server.
type Client struct {
	cfg    Config
	logger hclog.Logger
	gossip membership // *gossip.Pool, or staticServers
	pool   *transport.Pool
	tokens tokenCache  // resolved ACL tokens (acl.go)
	hub    *fanout.Hub // one upstream event stream per filter, fanned out
	// The data dir, held until Shutdown.
	dirLock *datadir.Lock

	preferred atomic.Pointer[string] // the server that answered last

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// New starts a client agent: it claims its data dir, joins gossip and
// returns. It does not wait for a server.
func New(cfg Config) (*Client, error) {
	if cfg.NodeID == "" || cfg.DataDir == "" || cfg.BindAddr == "" {
		return nil, errors.New("agent: config needs NodeID, DataDir and BindAddr")
	}
	if err := api.ValidateNewIdentifier("node", cfg.NodeID); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = time.Second
	}
	if cfg.RPCTimeout <= 0 {
		cfg.RPCTimeout = 10 * time.Second
	}
	if err := datadir.Create(cfg.DataDir); err != nil {
		return nil, err
	}
	lock, err := datadir.Hold(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	if err := nodeid.Claim(cfg.DataDir, cfg.NodeID); err != nil {
		lock.Release()
		return nil, err
	}
	if err := datadir.Tighten(cfg.DataDir); err != nil {
		lock.Release()
		return nil, err
	}
	datadir.WarnIfListable(cfg.DataDir, cfg.Logger)
	c := &Client{cfg: cfg, logger: cfg.Logger, dirLock: lock, pool: transport.NewPool(cfg.BindAddr, 2*time.Second, cfg.TLS)}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	hc := cfg.Events
	hc.Upstream = func(ctx context.Context, types []string, from *uint64) (<-chan *api.Event, error) {
		return c.upstream(ctx, types, from, upstreamHeartbeat)
	}
	if hc.Logger == nil {
		hc.Logger = c.logger.Named("events")
	}
	hub, err := fanout.New(hc)
	if err != nil {
		c.pool.Close()
		lock.Release()
		return nil, err
	}
	c.hub = hub
	if len(cfg.StaticServers) > 0 {
		c.gossip = staticServers(cfg.StaticServers)
		return c, nil
	}
	c.gossip, err = gossip.Start(gossip.Config{
		NodeID: cfg.NodeID, BindAddr: cfg.BindAddr, Port: cfg.GossipPort, Fast: cfg.GossipFast,
		Meta:       gossip.Meta{ID: cfg.NodeID, HTTPAddr: cfg.HTTPAddr, Role: api.RoleClient},
		PeersFile:  filepath.Join(cfg.DataDir, "gossip-peers.json"),
		Encryption: cfg.GossipEncryption, Logger: c.logger.Named("memberlist"),
	})
	if err != nil {
		c.hub.Close()
		c.pool.Close()
		lock.Release()
		return nil, err
	}
	if err := c.gossip.JoinAtStart(cfg.Join, cfg.RetryJoin, cfg.RetryInterval); err != nil {
		c.Shutdown()
		return nil, err
	}
	return c, nil
}

func (c *Client) goFunc(f func()) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f()
	}()
}

// GossipAddr is the agent's memberlist address.
func (c *Client) GossipAddr() string { return c.gossip.Addr() }

// GossipKeyring is the gossip encryption keyring (nil: plaintext).
func (c *Client) GossipKeyring() *gossip.Keyring { return c.gossip.Keyring() }

// LiveServers is how many servers gossip says are alive.
func (c *Client) LiveServers() int { return len(c.gossip.AliveServers()) }

// GossipMembers is how many members gossip counts alive or suspect: the
// fleet's size as this agent sees it.
func (c *Client) GossipMembers() int { return c.gossip.NumMembers() }

// Servers returns the server addresses of the servers gossip says are
// alive, the last one that answered first.
func (c *Client) Servers() []string {
	var out []string
	for _, m := range c.gossip.AliveServers() {
		out = append(out, m.RaftAddr)
	}
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	if p := c.preferred.Load(); p != nil {
		for i, a := range out {
			if a == *p {
				out[0], out[i] = out[i], out[0]
				break
			}
		}
	}
	return out
}

// errNoServer: gossip knows no live server (not joined yet, or every server
// is down or cut off).
var errNoServer = errors.New("agent: no live server known; is the agent joined?")

// call sends method to a server (see tryServers). A write whose outcome is
// unknown is not retried here: that is the caller's choice, with its
// request ID.
func (c *Client) call(ctx context.Context, method string, args, reply interface{}) error {
	return c.callTraced(ctx, false, method, args, reply)
}

// callTraced is call in a span of ctx's trace; with root, a span that may
// also begin a trace (sampled at the agent's rate): the writes, which the
// agent's host services (plugins dir, plugin socket) make on their own.
// Other calls (reads, status, streams) only continue a caller's trace.
func (c *Client) callTraced(ctx context.Context, root bool, method string, args, reply interface{}) error {
	var span trace.Span
	if root {
		ctx, span = c.cfg.Tracer.Start(ctx, "rpc "+method, trace.SpanKindClient)
	} else {
		ctx, span = c.cfg.Tracer.StartChild(ctx, "rpc "+method, trace.SpanKindClient)
	}
	if t, ok := args.(agentrpc.Tokened); ok {
		// In the header too, where the server checks it before it
		// decodes the args (a restore's archive is hundreds of MiB).
		ctx = transport.WithCallerToken(ctx, t.CallerToken())
	}
	err := c.tryServers(ctx, func(addr string) error { return c.pool.Call(ctx, addr, method, args, reply) })
	tracing.End(span, err)
	return err
}

// tryServers runs try against a server: the one that answered last, else
// the others in turn while the failure says nothing was done there
// (unreachable, starting, no leader there). The server that succeeds is
// preferred next time. Failures come back as api errors.
func (c *Client) tryServers(ctx context.Context, try func(addr string) error) error {
	servers := c.Servers()
	if len(servers) == 0 {
		return api.NewError(api.CodeNoServer, errNoServer)
	}
	var last error
	for _, addr := range servers {
		err := try(addr)
		if err == nil {
			c.preferred.Store(&addr)
			return nil
		}
		last = transport.CallError(err, api.CodeNoServer)
		if !retryElsewhere(last) || ctx.Err() != nil {
			return last
		}
		c.logger.Debug("server did not serve the call; trying another", "server", addr, "error", err)
	}
	return last
}

// retryElsewhere reports whether err means "not done here; another server
// may do it".
func retryElsewhere(err error) bool {
	if api.RefusalCode(err) != "" {
		return false // the request is wrong everywhere
	}
	var coded api.Coded
	return errors.As(err, &coded) && coded.Outcome() == api.NotApplied
}

// Leave announces the departure over gossip and leaves the pool; then
// Shutdown.
func (c *Client) Leave() error {
	if err := c.gossip.AnnounceLeaving(2 * time.Second); err != nil {
		c.logger.Warn("gossip leave intent failed", "error", err)
	}
	if err := c.gossip.Leave(5 * time.Second); err != nil {
		c.logger.Warn("gossip leave failed", "error", err)
	}
	return c.Shutdown()
}

// Shutdown stops the agent: its goroutines, gossip and RPC connections.
// Idempotent.
func (c *Client) Shutdown() error {
	var err error
	c.once.Do(func() {
		c.cancel()
		c.hub.Close()
		c.wg.Wait()
		err = c.gossip.Shutdown()
		c.pool.Close()
		err = errors.Join(err, c.dirLock.Release())
	})
	return err
}
