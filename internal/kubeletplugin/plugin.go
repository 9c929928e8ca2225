// Package kubeletplugin is a minimal plugin of the kubelet plugin
// registration protocol, over the generated k8s.io/kubelet API: it serves
// Registration (GetInfo, NotifyRegistrationStatus) on a unix socket, as a
// CSI node-driver-registrar or the DRA kubelet-plugin helper does. The
// example plugin, the process-level tests and the scale bench use it to
// stand in for real kubelet plugins.
package kubeletplugin

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"

	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Plugin serves the registration API at its socket.
type Plugin struct {
	registerapi.UnimplementedRegistrationServer
	path   string
	info   *registerapi.PluginInfo
	server *grpc.Server
	done   chan struct{}

	mu      sync.Mutex
	status  *registerapi.RegistrationStatus // the last one the agent sent
	changed chan struct{}                   // closed and replaced on every status
	onNote  func(*registerapi.RegistrationStatus)
}

// Start serves info's registration at path (the socket file is created;
// Stop removes it). onStatus, if set, is called with every status the
// agent sends.
func Start(path string, info *registerapi.PluginInfo, onStatus func(*registerapi.RegistrationStatus)) (*Plugin, error) {
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("kubelet plugin %s: %w", info.Name, err)
	}
	p := &Plugin{path: path, info: info, server: grpc.NewServer(), done: make(chan struct{}), changed: make(chan struct{}), onNote: onStatus}
	registerapi.RegisterRegistrationServer(p.server, p)
	go func() {
		defer close(p.done)
		_ = p.server.Serve(l)
	}()
	return p, nil
}

// Path is the plugin's registration socket.
func (p *Plugin) Path() string { return p.path }

// GetInfo answers the agent.
func (p *Plugin) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return p.info, nil
}

// NotifyRegistrationStatus records what the agent says.
func (p *Plugin) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	p.mu.Lock()
	p.status = s
	close(p.changed)
	p.changed = make(chan struct{})
	note := p.onNote
	p.mu.Unlock()
	if note != nil {
		note(s)
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// Registered waits until the agent has said the plugin is registered, or
// ctx ends.
func (p *Plugin) Registered(ctx context.Context) error {
	for {
		p.mu.Lock()
		st, ch := p.status, p.changed
		p.mu.Unlock()
		if st != nil && st.PluginRegistered {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			reason := "no status yet"
			if st != nil {
				reason = "refused: " + st.Error
			}
			return fmt.Errorf("kubelet plugin %s: %w (%s)", p.info.Name, ctx.Err(), reason)
		}
	}
}

// Stop stops serving and removes the socket: the agent deregisters the
// plugin.
func (p *Plugin) Stop() {
	p.server.Stop()
	<-p.done
	os.Remove(p.path)
}
