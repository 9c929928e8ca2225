package pluginsock

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/plugreg/plugreg/api"
	pb "github.com/plugreg/plugreg/api/pluginpb"
	"github.com/plugreg/plugreg/api/pluginrpc"
	"github.com/plugreg/plugreg/backend"
)

// Registrar keeps the host's registrations (agent.Host).
type Registrar interface {
	Put(ctx context.Context, info *api.PluginInfo) (api.WriteResult, error)
	Deregister(ctx context.Context, info *api.PluginInfo) error
}

// Subscriber is the node's event stream (a server's or a client agent's
// Backend): events of types (none: all) after *from (nil: from now), with
// heartbeats; it returns the position the stream starts after.
type Subscriber interface {
	Subscribe(ctx context.Context, types []string, from *uint64, heartbeat time.Duration) (<-chan backend.Event, uint64, error)
}

// Option keys the agent sets on a plugin's registration.
const (
	// OptionIdx is the plugin's idx.
	OptionIdx = "plugreg.stub.idx"
	// reservedPrefix starts option keys plugins may not set.
	reservedPrefix = "plugreg."
)

// Config of a plugin socket server.
type Config struct {
	// Path of the unix socket. A stale socket file there is replaced; a
	// live one (another agent) or a file that is not a socket is an error.
	Path string
	// Mode of the socket file (zero: 0660). Connecting takes write
	// permission on it.
	Mode os.FileMode
	// Owner and Group of the socket file: a user or group name, or a
	// numeric id (empty: the agent's, as created). The file is chowned
	// before it is served; an unknown name fails Listen. Changing the
	// owner takes root (CAP_CHOWN); an agent that is not root may set a
	// group it is in.
	Owner, Group string
	// AllowUIDs, when not empty, are the only uids whose processes may
	// use the socket: a peer whose uid, as the kernel recorded it when
	// the peer connected (SO_PEERCRED), is not listed is disconnected
	// before anything is read from it, and a warning logged with its uid
	// and pid. Root (uid 0) is not implicitly allowed: list it if it is.
	// Empty: any process that may open the socket file (Mode, Owner,
	// Group). Linux only.
	AllowUIDs []int
	NodeID    string

	Registrar Registrar
	Events    Subscriber

	// Grace keeps a plugin registered after its session ended without
	// Stop (zero: 10s).
	Grace time.Duration
	// RegistrationTimeout bounds each step of a session's handshake
	// (zero: 5s). A peer that does not complete it is dropped with
	// nothing registered.
	RegistrationTimeout time.Duration
	// RequestTimeout bounds the registry writes made for a plugin (zero:
	// 10s; the write is remembered and made later if it fails).
	RequestTimeout time.Duration
	// Heartbeat of the event streams (zero: 5s).
	Heartbeat time.Duration
	// ConfigDir holds operators' plugin configuration: IDX-NAME.conf or
	// NAME.conf, sent in Configure. Optional.
	ConfigDir string
	// MaxSessions caps the plugins connected at once (zero: 16384).
	MaxSessions int
	Logger      hclog.Logger
}

const maxConfigBytes = 256 << 10

func (c *Config) setDefaults() {
	if c.Mode == 0 {
		c.Mode = 0o660
	}
	if c.Grace <= 0 {
		c.Grace = 10 * time.Second
	}
	if c.RegistrationTimeout <= 0 {
		c.RegistrationTimeout = 5 * time.Second
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 10 * time.Second
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = 5 * time.Second
	}
	if c.MaxSessions <= 0 {
		c.MaxSessions = 16384
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
}

// Server serves the plugin socket.
type Server struct {
	pluginrpc.UnimplementedPluginsServer

	cfg    Config
	logger hclog.Logger
	grpc   *grpc.Server

	ctx    context.Context // ends with Stop: deregistrations after grace
	cancel context.CancelFunc
	wg     sync.WaitGroup // receive loops and grace deregistrations
	down   chan struct{}  // closed by Stop: sessions say Shutdown
	once   sync.Once

	settled      chan struct{} // closed ReturnWindow after Listen
	settledTimer *time.Timer

	mu      sync.Mutex
	closed  bool // Stop began: no new grace timers or removals
	plugins map[ident]*plugin

	stats struct{ sessions, reclaims, expired, stopped, refused atomic.Int64 }
}

type ident struct{ typ, name, idx string }

func (id ident) String() string { return id.typ + "/" + id.name + " idx " + id.idx }

// plugin is one plugin's registration held by this agent, and its live
// session if it has one.
type plugin struct {
	id         ident
	token      string
	info       *api.PluginInfo // what is registered for it (nil: nothing yet)
	live       *session        // nil while in grace
	grace      *time.Timer
	removing   chan struct{} // set while it is being deregistered; closed when done
	generation uint64        // bumped by every takeover: stale ends are ignored
	// uid is the user of the process that holds it (its last session's),
	// when known: in grace, another user may not take it over without
	// its token.
	uid    uint32
	hasUID bool
}

type session struct {
	supersede chan struct{} // closed when a newer session took the plugin over
	ended     chan struct{} // closed when the session has ended (release)
}

// Listen opens the socket and serves it until Stop.
func Listen(cfg Config) (*Server, error) {
	cfg.setDefaults()
	if cfg.Registrar == nil || cfg.Events == nil || cfg.NodeID == "" {
		return nil, errors.New("plugin socket: needs a Registrar, Events and NodeID")
	}
	// Who may use the socket is resolved before anything is created: a
	// mistyped name leaves no socket behind (nor removes a stale one).
	access, err := cfg.access()
	if err != nil {
		return nil, err
	}
	lis, err := listenUnix(cfg.Path, cfg.Mode, access)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, logger: cfg.Logger, down: make(chan struct{}), plugins: make(map[ident]*plugin)}
	if access.allow != nil {
		lis = &peerCredListener{Listener: lis, path: cfg.Path, allow: access.allow, logger: cfg.Logger, refused: &s.stats.refused}
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.grpc = grpc.NewServer(
		grpc.Creds(peerCreds{}), // each session knows its peer's uid (claim)
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, MaxConnectionIdle: time.Minute}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.MaxRecvMsgSize(1<<20),
		grpc.MaxConcurrentStreams(16),
		grpc.ConnectionTimeout(cfg.RegistrationTimeout),
		// Thousands of mostly idle sessions: small per-connection buffers
		// (gRPC's default is 32 KiB each way per connection).
		grpc.ReadBufferSize(4<<10),
		grpc.WriteBufferSize(4<<10),
	)
	pluginrpc.RegisterPluginsServer(s.grpc, s)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.grpc.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			s.logger.Error("plugin socket stopped serving", "path", cfg.Path, "error", err)
		}
	}()
	s.settled = make(chan struct{})
	window := s.ReturnWindow()
	s.settledTimer = time.AfterFunc(window, func() {
		s.logger.Info("plugins had their time to come back after the start; anti-entropy removes the registrations of those that did not", "window", window)
		close(s.settled)
	})
	s.logger.Info("plugin socket listening", "path", cfg.Path, "mode", cfg.Mode, "owner", cfg.Owner, "group", cfg.Group, "allow_uids", cfg.AllowUIDs)
	return s, nil
}

// maxSocketPath is the longest path a unix socket address holds on Linux.
const maxSocketPath = 107

func listenUnix(path string, mode os.FileMode, access socketAccess) (net.Listener, error) {
	if path == "" {
		return nil, errors.New("plugin socket: no path")
	}
	if len(path) > maxSocketPath {
		return nil, fmt.Errorf("plugin socket %s: path is %d bytes, a unix socket's is at most %d", path, len(path), maxSocketPath)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("plugin socket %s: %w", path, err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("plugin socket %s: exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("plugin socket %s: another process is listening on it", path)
		}
		if err := os.Remove(path); err != nil { // stale: its listener is gone
			return nil, fmt.Errorf("plugin socket %s: remove stale socket: %w", path, err)
		}
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("plugin socket %s: %w", path, err)
	}
	// Until this chmod the socket has the umask's mode; connecting needs
	// write permission, which a usual umask (022) gives only the owner.
	if err := os.Chmod(path, mode); err != nil {
		lis.Close() // removes the file
		return nil, fmt.Errorf("plugin socket %s: %w", path, err)
	}
	// Chowned after the chmod: meanwhile only the agent's own user and
	// group may connect, never a group the mode did not mean.
	if access.uid >= 0 || access.gid >= 0 {
		if err := os.Lchown(path, access.uid, access.gid); err != nil {
			lis.Close()
			return nil, fmt.Errorf("plugin socket %s: chown: %w", path, err)
		}
	}
	return lis, nil
}

// Path is the socket's path.
func (s *Server) Path() string { return s.cfg.Path }

// Settled is closed once the plugins that were registered before the
// agent's start have had their time to come back (ReturnWindow): only
// then may anti-entropy remove those that did not. It is never closed if
// Stop comes first.
func (s *Server) Settled() <-chan struct{} { return s.settled }

// ReturnWindow is how long after the agent's start its plugins have to
// come back before the registrations of those that did not may be
// removed: the grace period, but never less than a plugin's longest wait
// between two reconnect attempts (pluginpb.MaxReconnectBackoff) and a
// handshake (the registration timeout). A shorter window would remove
// plugins that are running and retrying, as the stub does, only because
// the agent came back while they were waiting.
func (s *Server) ReturnWindow() time.Duration {
	return max(s.cfg.Grace, pb.MaxReconnectBackoff+s.cfg.RegistrationTimeout)
}

// Stop tells every session the agent is going away, closes them and the
// socket, and waits for its goroutines. It deregisters nothing (see the
// package comment). Idempotent.
func (s *Server) Stop() {
	s.once.Do(func() {
		close(s.down)
		s.settledTimer.Stop()
		s.mu.Lock()
		s.closed = true
		for _, p := range s.plugins {
			if p.grace != nil {
				p.grace.Stop()
			}
		}
		s.mu.Unlock()
		s.cancel()
		// Sessions send Shutdown and return; a peer that does not read
		// cannot hold the agent: after a second the connections are cut.
		done := make(chan struct{})
		go func() {
			s.grpc.GracefulStop()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(time.Second):
			s.grpc.Stop()
			<-done
		}
		s.wg.Wait()
		os.Remove(s.cfg.Path)
	})
}

// Stats count sessions. Refused counts the connections closed because
// their peer's uid is not in AllowUIDs (they never became sessions).
type Stats struct {
	Live, InGrace                                 int
	Sessions, Reclaims, Expired, Stopped, Refused int64
}

// Stats returns the sessions' counters.
func (s *Server) Stats() Stats {
	st := Stats{Sessions: s.stats.sessions.Load(), Reclaims: s.stats.reclaims.Load(), Expired: s.stats.expired.Load(), Stopped: s.stats.stopped.Load(), Refused: s.stats.refused.Load()}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.plugins {
		if p.live != nil {
			st.Live++
		} else {
			st.InGrace++
		}
	}
	return st
}

// pluginOf validates a Register and returns the registration it asks for.
func (s *Server) pluginOf(r *pb.Register) (ident, *api.PluginInfo, error) {
	id := ident{r.GetType(), r.GetName(), r.GetIdx()}
	if !pb.ValidIdx(id.idx) {
		return id, nil, fmt.Errorf("%w: idx %q is not two digits (00 to 99)", api.ErrInvalid, id.idx)
	}
	for k := range r.GetOptions() {
		if strings.HasPrefix(k, reservedPrefix) {
			return id, nil, fmt.Errorf("%w: option %q: keys starting %q are reserved", api.ErrInvalid, k, reservedPrefix)
		}
	}
	info := &api.PluginInfo{
		Type: id.typ, Name: id.name, AllocID: allocID(s.cfg.NodeID, id), Version: r.GetVersion(),
		NodeID: s.cfg.NodeID, ConnectionInfo: r.GetEndpoint().API(), Options: make(map[string]string, len(r.GetOptions())+2),
	}
	for k, v := range r.GetOptions() {
		info.Options[k] = v
	}
	info.Options[api.OptionSource] = api.SourceStub
	info.Options[OptionIdx] = id.idx
	// The socket's edge: the host and the agent's client pass it on as is.
	if err := api.ValidateNewPlugin(info); err != nil { // type, name, endpoint, sizes
		return id, nil, err
	}
	return id, info, nil
}

// allocID is stable for a plugin on its node: a plugin that reconnects, or
// whose agent restarted, registers the same instance again.
func allocID(node string, id ident) string {
	h := sha256.Sum256([]byte(node + "\x00" + id.typ + "\x00" + id.name + "\x00" + id.idx))
	return "s-" + id.idx + "-" + hex.EncodeToString(h[:12])
}

func newToken() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// readConfig returns the operator's configuration for the plugin, if any.
func (s *Server) readConfig(id ident) (string, error) {
	if s.cfg.ConfigDir == "" {
		return "", nil
	}
	for _, name := range []string{id.idx + "-" + id.name + ".conf", id.name + ".conf"} {
		path := filepath.Join(s.cfg.ConfigDir, name)
		fi, err := os.Stat(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		if fi.Size() > maxConfigBytes {
			return "", fmt.Errorf("%s is %d bytes, at most %d", path, fi.Size(), maxConfigBytes)
		}
		b, err := os.ReadFile(path)
		return string(b), err
	}
	return "", nil
}

// grpcError maps an error to a gRPC status.
func grpcError(err error) error {
	switch {
	case errors.Is(err, api.ErrInvalid), errors.Is(err, api.ErrTooLarge):
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return status.Error(codes.Unavailable, err.Error())
}
