package pluginpb

import (
	"maps"
	"time"

	"github.com/plugreg/plugreg/api"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// FromPlugin converts an api.PluginInfo (nil stays nil).
func FromPlugin(p *api.PluginInfo) *PluginInfo {
	if p == nil {
		return nil
	}
	out := &PluginInfo{
		Type: p.Type, Name: p.Name, AllocId: p.AllocID, Version: p.Version, NodeId: p.NodeID,
		Options: maps.Clone(p.Options), CreateIndex: p.CreateIndex, ModifyIndex: p.ModifyIndex,
	}
	if ci := p.ConnectionInfo; ci != nil {
		out.Endpoint = &Endpoint{SocketPath: ci.SocketPath, Address: ci.Address}
	}
	if p.TTL != 0 {
		out.Ttl = durationpb.New(time.Duration(p.TTL))
	}
	if h := p.Health; h != nil {
		out.Health = &InstanceHealth{Status: string(h.Status), Check: h.Check, Reason: h.Reason, LastSeen: timestamppb.New(h.LastSeen)}
	}
	return out
}

// API converts to an api.PluginInfo (nil stays nil).
func (p *PluginInfo) API() *api.PluginInfo {
	if p == nil {
		return nil
	}
	out := &api.PluginInfo{
		Type: p.GetType(), Name: p.GetName(), AllocID: p.GetAllocId(), Version: p.GetVersion(), NodeID: p.GetNodeId(),
		ConnectionInfo: p.GetEndpoint().API(), CreateIndex: p.GetCreateIndex(), ModifyIndex: p.GetModifyIndex(),
	}
	if len(p.GetOptions()) > 0 {
		out.Options = maps.Clone(p.GetOptions())
	}
	if d := p.GetTtl(); d != nil {
		out.TTL = api.Duration(d.AsDuration())
	}
	if h := p.GetHealth(); h != nil {
		out.Health = &api.InstanceHealth{Status: api.HealthStatus(h.GetStatus()), Check: h.GetCheck(), Reason: h.GetReason()}
		if t := h.GetLastSeen(); t != nil {
			out.Health.LastSeen = t.AsTime()
		}
	}
	return out
}

// API converts to an api.ConnectionInfo (nil stays nil).
func (e *Endpoint) API() *api.ConnectionInfo {
	if e == nil {
		return nil
	}
	return &api.ConnectionInfo{SocketPath: e.GetSocketPath(), Address: e.GetAddress()}
}

var kinds = map[api.EventType]EventKind{
	api.EventRegistered:   EventKind_EVENT_KIND_REGISTERED,
	api.EventUpdated:      EventKind_EVENT_KIND_UPDATED,
	api.EventDeregistered: EventKind_EVENT_KIND_DEREGISTERED,
	api.EventReset:        EventKind_EVENT_KIND_RESET,
	api.EventHeartbeat:    EventKind_EVENT_KIND_HEARTBEAT,
	api.EventExpired:      EventKind_EVENT_KIND_EXPIRED,
	api.EventHealth:       EventKind_EVENT_KIND_HEALTH,
	api.EventError:        EventKind_EVENT_KIND_ERROR,
}

// KindOf is the EventKind of an api.EventType (UNSPECIFIED for an unknown one).
func KindOf(t api.EventType) EventKind { return kinds[t] }

// APIType is the api.EventType of k ("" for an unknown kind).
func (k EventKind) APIType() api.EventType {
	switch k {
	case EventKind_EVENT_KIND_REGISTERED:
		return api.EventRegistered
	case EventKind_EVENT_KIND_UPDATED:
		return api.EventUpdated
	case EventKind_EVENT_KIND_DEREGISTERED:
		return api.EventDeregistered
	case EventKind_EVENT_KIND_RESET:
		return api.EventReset
	case EventKind_EVENT_KIND_HEARTBEAT:
		return api.EventHeartbeat
	case EventKind_EVENT_KIND_EXPIRED:
		return api.EventExpired
	case EventKind_EVENT_KIND_HEALTH:
		return api.EventHealth
	case EventKind_EVENT_KIND_ERROR:
		return api.EventError
	}
	return ""
}

// FromEvent converts an api.Event.
func FromEvent(ev *api.Event) *Event {
	out := &Event{Index: ev.Index, Kind: KindOf(ev.EventType), Info: FromPlugin(ev.Info), Current: FromPlugin(ev.Current)}
	if ev.Error != nil {
		out.Error = &StreamError{Code: ev.Error.Code, Message: ev.Error.Message}
	}
	if len(ev.Plugins) > 0 {
		out.Plugins = make([]*PluginInfo, len(ev.Plugins))
		for i, p := range ev.Plugins {
			out.Plugins[i] = FromPlugin(p)
		}
	}
	return out
}

// API converts to an api.Event.
func (e *Event) API() *api.Event {
	out := &api.Event{Index: e.GetIndex(), EventType: e.GetKind().APIType(), Info: e.GetInfo().API(), Current: e.GetCurrent().API()}
	if se := e.GetError(); se != nil {
		out.Error = &api.StreamError{Code: se.GetCode(), Message: se.GetMessage()}
	}
	if len(e.GetPlugins()) > 0 {
		out.Plugins = make([]*api.PluginInfo, len(e.GetPlugins()))
		for i, p := range e.GetPlugins() {
			out.Plugins[i] = p.API()
		}
	}
	return out
}
