package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// rec names one plugin instance; both systems store the same bytes for it.
type rec struct{ Type, Name, Alloc string }

// pluginInfo is the ~200-byte record of the bench: what a node agent would
// register for a CSI node plugin.
func (r rec) pluginInfo() *api.PluginInfo {
	return &api.PluginInfo{
		Type: r.Type, Name: r.Name, AllocID: r.Alloc, Version: "1.4.0", NodeID: "node-0042",
		ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/plugins/" + r.Alloc + "/csi.sock"},
		Options:        map[string]string{"zone": "eu-west-1a"},
	}
}

func (r rec) etcdKey() string { return "/plugins/" + r.Type + "/" + r.Name + "/" + r.Alloc }

// system is one of the two registries under test, as the load generator
// sees it. Every method is safe for concurrent use.
type system interface {
	name() string
	// writer returns a client for one concurrent worker that talks to
	// node i first (plugreg fails over to the others; etcd's client is
	// pinned to i, as etcd's own benchmark tool pins connections).
	writer(i int) (writer, error)
	// reader returns a client that talks only to node i.
	reader(i int) (reader, error)
	// watcher starts one watch of every change under typ on node i,
	// calling fn with the alloc ID of every registration it is told of.
	watch(ctx context.Context, i int, typ string, fn func(alloc string)) (stop func(), err error)
	leader(ctx context.Context) (int, error)
	kill(i int)
	restart(i int) error
	waitReady(ctx context.Context, timeout time.Duration) error
	pid(i int) int
	// metrics says where the members serve their Prometheus metrics
	// and which series count Raft log fsyncs and snapshots (metrics.go).
	metrics() metricsSource
	// procs are the members' processes, for -pause-idle (idle.go).
	procs() []*proc
	// term is the Raft term member i is in.
	term(ctx context.Context, i int) (uint64, error)
}

type writer interface {
	register(ctx context.Context, r rec) error
	deregister(ctx context.Context, r rec) error
	close()
}

type reader interface {
	// list reads every instance of typ and returns how many came back.
	list(ctx context.Context, typ string, stale bool) (int, error)
	close()
}

// ---- plugreg ----

// plugregSystem is a plugreg cluster; label is "plugreg", or "baseline"
// for the cluster -baseline-bin/-baseline-flags start beside it.
type plugregSystem struct {
	c     *plugregCluster
	label string
	// watchJSON: watchers read the JSON stream, not protobuf.
	watchJSON bool
}

func (s *plugregSystem) name() string {
	if s.label == "" {
		return "plugreg"
	}
	return s.label
}

func (s *plugregSystem) newClient(addrs []string) (*client.Client, *http.Transport, error) {
	// One transport per client: a client is one connection, like one
	// etcd client is one gRPC connection.
	tr := &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: 90 * time.Second, TLSClientConfig: s.c.tls}
	cli, err := client.New(client.Config{Addrs: addrs, HTTPClient: &http.Client{Transport: tr}, RetryWait: 10 * time.Millisecond, Protobuf: s.c.protobuf})
	if err != nil {
		return nil, nil, fmt.Errorf("plugreg client: %w", err)
	}
	return cli, tr, nil
}

func (s *plugregSystem) writer(i int) (writer, error) {
	addrs := s.c.httpAddrs()
	addrs = append(addrs[i:], addrs[:i]...)
	cli, tr, err := s.newClient(addrs)
	if err != nil {
		return nil, err
	}
	return &plugregClient{cli: cli, tr: tr}, nil
}

func (s *plugregSystem) pinnedWriter(i int) (writer, error) {
	cli, tr, err := s.newClient([]string{s.c.url(s.c.nodes[i])})
	if err != nil {
		return nil, err
	}
	return &plugregClient{cli: cli, tr: tr}, nil
}

func (s *plugregSystem) reader(i int) (reader, error) {
	cli, tr, err := s.newClient([]string{s.c.url(s.c.nodes[i])})
	if err != nil {
		return nil, err
	}
	return &plugregClient{cli: cli, tr: tr}, nil
}

type plugregClient struct {
	cli *client.Client
	tr  *http.Transport
}

func (p *plugregClient) register(ctx context.Context, r rec) error {
	_, err := p.cli.Register(ctx, r.pluginInfo())
	return err
}

func (p *plugregClient) deregister(ctx context.Context, r rec) error {
	_, err := p.cli.Deregister(ctx, r.Type, r.Name, r.Alloc)
	return err
}

func (p *plugregClient) list(ctx context.Context, typ string, stale bool) (int, error) {
	l, _, err := p.cli.List(ctx, typ, &client.QueryOptions{Stale: stale})
	return len(l), err
}

func (p *plugregClient) close() { p.tr.CloseIdleConnections() }

func (s *plugregSystem) watch(ctx context.Context, i int, typ string, fn func(string)) (func(), error) {
	cli, tr, err := s.newClient([]string{s.c.url(s.c.nodes[i])})
	if err != nil {
		return nil, err
	}
	// Start at the node's applied index: only new events.
	_, meta, err := cli.List(ctx, typ, &client.QueryOptions{Stale: true})
	if err != nil {
		return nil, fmt.Errorf("plugreg watch start index: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	ch := cli.Stream(ctx, meta.Index, client.WatchOptions{Types: []string{typ}, JSON: s.watchJSON}).Events()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range ch {
			if ev.EventType == "registered" && ev.Info != nil {
				fn(ev.Info.AllocID)
			}
		}
	}()
	return func() { cancel(); <-done; tr.CloseIdleConnections() }, nil
}

func (s *plugregSystem) leader(ctx context.Context) (int, error) { return s.c.leader(ctx) }
func (s *plugregSystem) kill(i int)                              { s.c.nodes[i].proc.kill() }
func (s *plugregSystem) restart(i int) error                     { return s.c.nodes[i].proc.start() }
func (s *plugregSystem) pid(i int) int                           { return s.c.nodes[i].proc.pid() }
func (s *plugregSystem) waitReady(ctx context.Context, d time.Duration) error {
	return s.c.waitReady(ctx, d)
}

func (s *plugregSystem) procs() []*proc {
	var out []*proc
	for _, n := range s.c.nodes {
		out = append(out, n.proc)
	}
	return out
}

func (s *plugregSystem) term(ctx context.Context, i int) (uint64, error) {
	h, err := s.c.health(ctx, s.c.nodes[i])
	return h.Term, err
}

func (s *plugregSystem) metrics() metricsSource {
	src := metricsSource{hc: s.c.hc, fsyncs: []string{plugregFollowerStores, plugregFollowerStoresOld},
		snapshots:    []string{plugregSnapshots, plugregSnapshotsOld},
		leaderWrites: []string{plugregLeaderWrites}, dispatches: []string{plugregLeaderDispatches, plugregLeaderDispatchesOld}}
	for _, n := range s.c.nodes {
		src.urls = append(src.urls, s.c.url(n)+"/v1/metrics")
	}
	return src
}

// ---- etcd ----

type etcdSystem struct{ c *etcdCluster }

func (s *etcdSystem) name() string { return "etcd" }

func (s *etcdSystem) writer(i int) (writer, error) {
	cli, err := newEtcdClient(s.c.members[i].endpoint())
	if err != nil {
		return nil, err
	}
	return &etcdClient{cli: cli}, nil
}

func (s *etcdSystem) reader(i int) (reader, error) {
	cli, err := newEtcdClient(s.c.members[i].endpoint())
	if err != nil {
		return nil, err
	}
	return &etcdClient{cli: cli}, nil
}

type etcdClient struct{ cli *clientv3.Client }

func (e *etcdClient) register(ctx context.Context, r rec) error {
	// Marshal per operation, as the plugreg client does.
	b, err := json.Marshal(r.pluginInfo())
	if err != nil {
		return err
	}
	_, err = e.cli.Put(ctx, r.etcdKey(), string(b))
	return err
}

func (e *etcdClient) deregister(ctx context.Context, r rec) error {
	_, err := e.cli.Delete(ctx, r.etcdKey())
	return err
}

func (e *etcdClient) list(ctx context.Context, typ string, stale bool) (int, error) {
	opts := []clientv3.OpOption{clientv3.WithPrefix()}
	if stale {
		opts = append(opts, clientv3.WithSerializable())
	}
	resp, err := e.cli.Get(ctx, "/plugins/"+typ+"/", opts...)
	if err != nil {
		return 0, err
	}
	// Decode like the plugreg client decodes its JSON answer, so both
	// sides pay for turning bytes into records.
	for _, kv := range resp.Kvs {
		var p api.PluginInfo
		if err := json.Unmarshal(kv.Value, &p); err != nil {
			return 0, fmt.Errorf("decode %s: %w", kv.Key, err)
		}
	}
	return len(resp.Kvs), nil
}

func (e *etcdClient) close() { e.cli.Close() }

func (s *etcdSystem) watch(ctx context.Context, i int, typ string, fn func(string)) (func(), error) {
	cli, err := newEtcdClient(s.c.members[i].endpoint())
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	wch := cli.Watch(ctx, "/plugins/"+typ+"/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	// Wait for the watch to exist, as the plugreg watcher's start index
	// makes it see every later write.
	select {
	case resp, ok := <-wch:
		if !ok || !resp.Created {
			cancel()
			cli.Close()
			return nil, fmt.Errorf("etcd watch on %s not created: %v", s.c.members[i].name, resp.Err())
		}
	case <-time.After(10 * time.Second):
		cancel()
		cli.Close()
		return nil, fmt.Errorf("etcd watch on %s: no created notification", s.c.members[i].name)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for resp := range wch {
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypePut {
					k := string(ev.Kv.Key)
					fn(k[strings.LastIndexByte(k, '/')+1:])
				}
			}
		}
	}()
	return func() { cancel(); <-done; cli.Close() }, nil
}

func (s *etcdSystem) leader(ctx context.Context) (int, error) { return s.c.leader(ctx) }
func (s *etcdSystem) kill(i int)                              { s.c.members[i].proc.kill() }
func (s *etcdSystem) restart(i int) error                     { return s.c.members[i].proc.start() }
func (s *etcdSystem) pid(i int) int                           { return s.c.members[i].proc.pid() }
func (s *etcdSystem) waitReady(ctx context.Context, d time.Duration) error {
	return s.c.waitReady(ctx, d)
}

func (s *etcdSystem) procs() []*proc {
	var out []*proc
	for _, m := range s.c.members {
		out = append(out, m.proc)
	}
	return out
}

func (s *etcdSystem) term(ctx context.Context, i int) (uint64, error) {
	m := s.c.members[i]
	cli, err := newEtcdClient(m.endpoint())
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := cli.Status(ctx, m.endpoint())
	if err != nil {
		return 0, fmt.Errorf("status of %s: %w", m.name, err)
	}
	return st.RaftTerm, nil
}

func (s *etcdSystem) metrics() metricsSource {
	src := metricsSource{hc: scrapeClient, fsyncs: []string{etcdWALFsyncs}, snapshots: []string{etcdSnapshots}}
	for _, m := range s.c.members {
		src.urls = append(src.urls, "http://"+m.endpoint()+"/metrics")
	}
	return src
}
