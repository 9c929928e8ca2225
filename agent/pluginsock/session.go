package pluginsock

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plugreg/plugreg/api"
	pb "github.com/plugreg/plugreg/api/pluginpb"
	"github.com/plugreg/plugreg/api/pluginrpc"
)

// Session serves one plugin's session (see the package comment).
func (s *Server) Session(stream pluginrpc.Plugins_SessionServer) error {
	ctx := stream.Context()
	s.stats.sessions.Add(1)

	// The receive loop: the only caller of Recv. It ends when the stream
	// does (the handler's return ends the stream's context).
	msgs := make(chan *pb.PluginMessage)
	recvErr := make(chan error, 1)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			m, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	next := func(what string) (*pb.PluginMessage, error) {
		t := time.NewTimer(s.cfg.RegistrationTimeout)
		defer t.Stop()
		select {
		case m := <-msgs:
			return m, nil
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil, status.Errorf(codes.Canceled, "plugin closed the session before %s", what)
			}
			return nil, err
		case <-t.C:
			return nil, status.Errorf(codes.DeadlineExceeded, "no %s within %v", what, s.cfg.RegistrationTimeout)
		case <-s.down:
			return nil, status.Error(codes.Unavailable, "the agent is stopping")
		}
	}

	m, err := next("Register")
	if err != nil {
		return err
	}
	reg := m.GetRegister()
	if reg == nil {
		return status.Error(codes.InvalidArgument, "the first message of a session must be Register")
	}
	id, info, err := s.pluginOf(reg)
	if err != nil {
		s.logger.Warn("plugin registration refused", "plugin", id, "error", err)
		return grpcError(fmt.Errorf("register %s: %w", id, err))
	}
	config, err := s.readConfig(id)
	if err != nil {
		return status.Errorf(codes.FailedPrecondition, "register %s: plugin configuration: %v", id, err)
	}
	p, sess, reclaimed, err := s.claim(ctx, id, reg.GetSessionToken())
	if err != nil {
		return err
	}
	defer s.release(p, sess)
	if reclaimed {
		s.stats.reclaims.Add(1)
	}
	err = stream.Send(&pb.AgentMessage{Msg: &pb.AgentMessage_Configure{Configure: &pb.Configure{
		NodeId: s.cfg.NodeID, Config: config,
		RegistrationTimeoutMs: s.cfg.RegistrationTimeout.Milliseconds(), RequestTimeoutMs: s.cfg.RequestTimeout.Milliseconds(),
		SessionToken: p.token, AllocId: info.AllocID, Reclaimed: reclaimed,
	}}})
	if err != nil {
		return err
	}
	if m, err = next("Subscribe"); err != nil {
		return err
	}
	if m.GetStop() != nil { // a plugin stopping while it was reconnecting
		return s.stop(ctx, p, sess)
	}
	sub := m.GetSubscribe()
	if sub == nil {
		return status.Error(codes.InvalidArgument, "the message after Configure must be Subscribe (or Stop)")
	}
	var from *uint64
	if sub.FromIndex != nil {
		f := sub.GetFromIndex()
		from = &f
	}
	events, start, err := s.cfg.Events.Subscribe(ctx, sub.GetTypes(), from, s.cfg.Heartbeat) // validates the types
	if err != nil {
		return grpcError(fmt.Errorf("subscribe %s: %w", id, err))
	}

	ready := &pb.Ready{StartIndex: start}
	if s.needsWrite(p, info) {
		wctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
		res, err := s.cfg.Registrar.Put(wctx, info)
		cancel()
		if err != nil { // remembered by the host: anti-entropy makes it later (pluginOf validated it)
			ready.Pending = err.Error()
			s.logger.Warn("plugin registration pending", "plugin", id, "error", err)
		} else {
			ready.Index = res.Index
		}
		s.mu.Lock()
		p.info = info
		s.mu.Unlock()
	}
	if err := stream.Send(&pb.AgentMessage{Msg: &pb.AgentMessage_Ready{Ready: ready}}); err != nil {
		return err
	}
	s.logger.Debug("plugin session ready", "plugin", id, "reclaimed", reclaimed, "index", ready.Index, "start", start)

	mask := sub.GetMask()
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return status.Error(codes.Unavailable, "the node's event stream ended; resume from the last index")
			}
			// The plugin's mask picks the change kinds it gets;
			// heartbeats and resets always go (pb.MaskedKind), and an
			// expiry goes as a deregistration to a plugin that asked
			// for those only.
			kind, send := pb.MaskedKind(mask, pb.KindOf(ev.EventType))
			if !send {
				continue
			}
			msg := pb.FromEvent(ev.Event)
			msg.Kind = kind
			if err := stream.Send(&pb.AgentMessage{Msg: &pb.AgentMessage_Event{Event: msg}}); err != nil {
				return err
			}
		case m := <-msgs:
			if m.GetStop() == nil {
				return status.Error(codes.InvalidArgument, "unexpected message after Subscribe (only Stop may follow)")
			}
			return s.stop(ctx, p, sess)
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return status.Error(codes.Canceled, "plugin closed the session without Stop")
			}
			return err
		case <-sess.supersede:
			return status.Error(codes.Aborted, "a newer session of this plugin took it over")
		case <-s.down:
			stream.Send(&pb.AgentMessage{Msg: &pb.AgentMessage_Shutdown{Shutdown: &pb.Shutdown{Reason: "the agent is stopping"}}})
			return status.Error(codes.Unavailable, "the agent is stopping")
		}
	}
}

// needsWrite reports whether info must be written for p: nothing is
// registered for it yet, or it changed.
func (s *Server) needsWrite(p *plugin, info *api.PluginInfo) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return p.info == nil || !api.SameContent(p.info, info)
}

// claim makes sess the live session of id: a new plugin, one in grace
// (reclaimed: without its token, only by the same user), or a live one
// whose token the caller has (the old session is superseded). A plugin
// being deregistered is waited for.
func (s *Server) claim(ctx context.Context, id ident, token string) (*plugin, *session, bool, error) {
	uid, hasUID := uidOf(ctx)
	waited := false
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, nil, false, status.Error(codes.Unavailable, "the agent is stopping")
		}
		p := s.plugins[id]
		if p != nil && p.removing != nil {
			done := p.removing
			s.mu.Unlock()
			select {
			case <-done:
				continue
			case <-ctx.Done():
				return nil, nil, false, status.FromContextError(ctx.Err()).Err()
			}
		}
		sess := &session{supersede: make(chan struct{}), ended: make(chan struct{})}
		reclaimed := false
		switch {
		case p == nil:
			if len(s.plugins) >= s.cfg.MaxSessions {
				s.mu.Unlock()
				return nil, nil, false, status.Errorf(codes.ResourceExhausted, "register %s: the agent holds %d plugins, its limit", id, s.cfg.MaxSessions)
			}
			p = &plugin{id: id, token: newToken()}
			s.plugins[id] = p
		case p.live != nil:
			if token == "" || subtle.ConstantTimeCompare([]byte(token), []byte(p.token)) != 1 {
				// A plugin restarted at once may come before the agent has
				// seen its old connection end: give that a moment.
				ended := p.live.ended
				s.mu.Unlock()
				if !waited {
					waited = true
					t := time.NewTimer(min(time.Second, s.cfg.RegistrationTimeout/2))
					select {
					case <-ended:
						t.Stop()
						continue
					case <-t.C:
						continue
					case <-ctx.Done():
						t.Stop()
						return nil, nil, false, status.FromContextError(ctx.Err()).Err()
					}
				}
				return nil, nil, false, status.Errorf(codes.AlreadyExists,
					"register %s: this plugin is connected in another session (a second instance needs its own idx)", id)
			}
			close(p.live.supersede)
			reclaimed = true
		default: // in grace
			if token == "" || subtle.ConstantTimeCompare([]byte(token), []byte(p.token)) != 1 {
				// Without the token: a restarted plugin, which runs as the
				// user the old one did. Another user's process may not
				// take over its identity (and then stop it or move its
				// endpoint).
				if hasUID && p.hasUID && uid != p.uid {
					s.mu.Unlock()
					return nil, nil, false, status.Errorf(codes.PermissionDenied,
						"register %s: held by uid %d until its grace period ends; another user may take it over only with its session token", id, p.uid)
				}
				// Another process took it over: the old token must not
				// take it back, or two processes of one identity would
				// supersede each other in turn.
				p.token = newToken()
			}
			p.grace.Stop()
			p.grace = nil
			reclaimed = true
		}
		p.live = sess
		p.uid, p.hasUID = uid, hasUID
		p.generation++
		s.mu.Unlock()
		return p, sess, reclaimed, nil
	}
}

// release ends sess: if it is still p's live session, p keeps its
// registration for the grace period (or is forgotten, if nothing was
// registered for it). When the agent stops, registrations are kept.
func (s *Server) release(p *plugin, sess *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(sess.ended)
	if p.live != sess {
		return // superseded, or stopped
	}
	p.live = nil
	if s.closed {
		return
	}
	if p.info == nil {
		delete(s.plugins, p.id)
		return
	}
	gen := p.generation
	p.grace = time.AfterFunc(s.cfg.Grace, func() { s.expire(p, gen) })
}

// expire deregisters p when its grace period ended with no new session.
func (s *Server) expire(p *plugin, gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.plugins[p.id] != p || p.generation != gen || p.live != nil || p.removing != nil {
		return
	}
	s.stats.expired.Add(1)
	s.logger.Info("plugin did not come back within the grace period; deregistering", "plugin", p.id, "grace", s.cfg.Grace)
	s.remove(p)
}

// stop is an orderly Stop of sess: p is deregistered at once and the
// session ends when that is done.
func (s *Server) stop(ctx context.Context, p *plugin, sess *session) error {
	s.mu.Lock()
	if p.live != sess || s.closed {
		s.mu.Unlock()
		return status.Error(codes.Aborted, "session no longer holds the plugin")
	}
	s.stats.stopped.Add(1)
	done := s.remove(p)
	s.mu.Unlock()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

// remove deregisters p and then forgets it; sessions claiming its
// identity meanwhile wait (a deregistration must not land after their
// registration). Called with s.mu held and s not closed.
func (s *Server) remove(p *plugin) <-chan struct{} {
	done := make(chan struct{})
	p.removing, p.live = done, nil
	if p.grace != nil {
		p.grace.Stop()
		p.grace = nil
	}
	info := p.info
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if info != nil {
			ctx, cancel := context.WithTimeout(s.ctx, s.cfg.RequestTimeout)
			// On failure the host has forgotten it: anti-entropy removes it.
			if err := s.cfg.Registrar.Deregister(ctx, info); err != nil {
				s.logger.Warn("plugin deregistration failed; anti-entropy will remove it", "plugin", p.id, "error", err)
			}
			cancel()
		}
		s.mu.Lock()
		if s.plugins[p.id] == p {
			delete(s.plugins, p.id)
		}
		close(done)
		s.mu.Unlock()
	}()
	return done
}
