package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/api/pluginpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Both clusters run three members on 127.0.0.1, .2 and .3, so that every
// member is a distinct host to the others, each on its own ports too.
const members = 3

func memberIP(i int) string { return "127.0.0." + strconv.Itoa(i+1) }

// ---- plugreg ----

type plugregNode struct {
	id                            string
	ip                            string
	httpPort, srvPort, gossipPort int
	pprofPort                     int
	dataDir                       string
	proc                          *proc
}

func (n *plugregNode) httpAddr() string  { return net.JoinHostPort(n.ip, strconv.Itoa(n.httpPort)) }
func (n *plugregNode) raftAddr() string  { return net.JoinHostPort(n.ip, strconv.Itoa(n.srvPort)) }
func (n *plugregNode) pprofAddr() string { return net.JoinHostPort(n.ip, strconv.Itoa(n.pprofPort)) }

type plugregCluster struct {
	nodes []*plugregNode
	hc    *http.Client
	// tls, when set, is the clients' TLS: the cluster runs with mutual
	// TLS (benchTLS) and serves HTTPS.
	tls *tls.Config
	// protobuf: the cluster takes registrations in protobuf
	// (api.PluginProtobuf), and the bench's clients send them so, as an
	// etcd client sends protobuf (found out by waitReady; a release
	// before it answers 400).
	protobuf bool
}

// url is the base URL of node n's HTTP API.
func (c *plugregCluster) url(n *plugregNode) string {
	if c.tls != nil {
		return "https://" + n.httpAddr()
	}
	return "http://" + n.httpAddr()
}

// startPlugreg starts three agents as real processes. extra is appended to
// every agent's flags (e.g. -log-store wal).
func startPlugreg(bin, dir string, extra []string) (*plugregCluster, error) {
	return startPlugregAs("plugreg", 27000, bin, dir, extra)
}

// startPlugregAs starts a three-server cluster named label (its data dirs
// and logs are label-nN) on ports base+300.. (server), +400.. (gossip),
// +500.. (HTTP), +600.. (pprof).
func startPlugregAs(label string, base int, bin, dir string, extra []string) (*plugregCluster, error) {
	return startPlugregTLS(label, base, bin, dir, extra, nil)
}

// startPlugregTLS is startPlugregAs with the agents on mutual TLS when bt
// is set.
func startPlugregTLS(label string, base int, bin, dir string, extra []string, bt *benchTLS) (*plugregCluster, error) {
	return startPlugregOn(memberIP, label, base, bin, dir, extra, bt)
}

// startPlugregOn is startPlugregTLS with member i on ipOf(i).
func startPlugregOn(ipOf func(int) string, label string, base int, bin, dir string, extra []string, bt *benchTLS) (*plugregCluster, error) {
	c := &plugregCluster{hc: &http.Client{Timeout: 2 * time.Second}}
	if bt != nil {
		c.tls = bt.client
		c.hc.Transport = &http.Transport{TLSClientConfig: bt.client}
		extra = append(append([]string(nil), extra...), bt.agentArgs...)
	}
	if agentHasFlag(bin, "http-max-conns-per-client") {
		// Every bench client dials from one address, up to 256 of them
		// to one node in a list cell; etcd has no such bound.
		extra = append([]string{"-http-max-conns-per-client", "-1"}, extra...)
	}
	for i := 0; i < members; i++ {
		n := &plugregNode{
			id: fmt.Sprintf("n%d", i+1), ip: ipOf(i),
			httpPort: base + 500 + i, srvPort: base + 300 + i, gossipPort: base + 400 + i, pprofPort: base + 600 + i,
		}
		n.dataDir = plugregDataDir(dir, label, i)
		args := []string{"agent", "-node", n.id, "-data-dir", n.dataDir, "-bind", n.ip,
			"-http-port", strconv.Itoa(n.httpPort), "-server-port", strconv.Itoa(n.srvPort),
			"-gossip-port", strconv.Itoa(n.gossipPort), "-pprof", n.pprofAddr(),
			"-bootstrap-expect", "3", "-join", net.JoinHostPort(ipOf(0), strconv.Itoa(base+400)), "-retry-join",
			"-log-level", "warn"}
		args = append(args, extra...)
		n.proc = &proc{name: label + " " + n.id, path: bin, args: args, logPath: filepath.Join(dir, label+"-"+n.id+".log")}
		c.nodes = append(c.nodes, n)
	}
	for _, n := range c.nodes {
		if err := n.proc.start(); err != nil {
			return c, err
		}
	}
	return c, nil
}

// plugregDataDir is the data dir of member i of the plugreg cluster named
// label.
func plugregDataDir(dir, label string, i int) string {
	return filepath.Join(dir, fmt.Sprintf("%s-n%d", label, i+1))
}

// etcdDataDir is the data dir of etcd member i.
func etcdDataDir(dir string, i int) string {
	return filepath.Join(dir, fmt.Sprintf("etcd-e%d", i+1))
}

func (c *plugregCluster) stop() {
	for _, n := range c.nodes {
		n.proc.stop(10 * time.Second)
	}
}

func (c *plugregCluster) httpAddrs() []string {
	var out []string
	for _, n := range c.nodes {
		out = append(out, c.url(n))
	}
	return out
}

type plugregHealth struct {
	Status       string
	Leader       string
	AppliedIndex uint64
	Term         uint64
}

func (c *plugregCluster) health(ctx context.Context, n *plugregNode) (plugregHealth, error) {
	var h plugregHealth
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url(n)+"/v1/health", nil)
	if err != nil {
		return h, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return h, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		return h, fmt.Errorf("decode health of %s: %w", n.id, err)
	}
	if resp.StatusCode != http.StatusOK {
		return h, fmt.Errorf("%s: health %d %s", n.id, resp.StatusCode, h.Status)
	}
	return h, nil
}

// leader returns the index of the leader, asking the live nodes.
func (c *plugregCluster) leader(ctx context.Context) (int, error) {
	var lastErr error
	for _, n := range c.nodes {
		if !n.proc.running() {
			continue
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url(n)+"/v1/status/leader", nil)
		if err != nil {
			return -1, err
		}
		resp, err := c.hc.Do(req)
		if err != nil {
			lastErr = err
			continue
		}
		var addr string
		err = json.NewDecoder(resp.Body).Decode(&addr)
		resp.Body.Close()
		if err != nil {
			lastErr = err
			continue
		}
		for i, m := range c.nodes {
			if m.raftAddr() == addr {
				return i, nil
			}
		}
		lastErr = fmt.Errorf("%s knows no leader (%q)", n.id, addr)
	}
	return -1, fmt.Errorf("plugreg leader: %w", lastErr)
}

// waitReady waits until every running node answers health 200 and all of
// them name the same leader.
func (c *plugregCluster) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var lastErr error
	for {
		lastErr = func() error {
			leaders := map[int]bool{}
			for _, n := range c.nodes {
				if _, err := c.health(ctx, n); err != nil {
					return err
				}
			}
			for range c.nodes {
				l, err := c.leader(ctx)
				if err != nil {
					return err
				}
				leaders[l] = true
			}
			if len(leaders) != 1 {
				return errors.New("nodes disagree on the leader")
			}
			return nil
		}()
		if lastErr == nil {
			c.protobuf = c.takesProtobuf(ctx)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("plugreg not ready: %w (last: %v)", ctx.Err(), lastErr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// takesProtobuf registers a probe instance with a protobuf body.
func (c *plugregCluster) takesProtobuf(ctx context.Context) bool {
	p := &api.PluginInfo{Type: "warmup", Name: "protobuf", AllocID: "probe", ConnectionInfo: &api.ConnectionInfo{Address: "x"}}
	body, err := pluginpb.FromPlugin(p).MarshalVT()
	if err != nil {
		return false
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url(c.nodes[0])+"/v1/plugins", bytes.NewReader(body))
	if err != nil {
		return false
	}
	req.Header.Set("Content-Type", api.PluginProtobuf)
	resp, err := c.hc.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// ---- etcd ----

type etcdMember struct {
	name                 string
	ip                   string
	clientPort, peerPort int
	proc                 *proc
}

func (m *etcdMember) endpoint() string {
	return net.JoinHostPort(m.ip, strconv.Itoa(m.clientPort))
}

type etcdCluster struct {
	members []*etcdMember
}

// startEtcd starts a three-member etcd cluster with default durability
// (fsync on every commit) and default timing.
func startEtcd(bin, dir string, extra []string) (*etcdCluster, error) {
	c := &etcdCluster{}
	var initial []string
	for i := 0; i < members; i++ {
		m := &etcdMember{name: fmt.Sprintf("e%d", i+1), ip: memberIP(i), clientPort: 22379 + 10*i, peerPort: 22380 + 10*i}
		c.members = append(c.members, m)
		initial = append(initial, fmt.Sprintf("%s=http://%s", m.name, net.JoinHostPort(m.ip, strconv.Itoa(m.peerPort))))
	}
	for i, m := range c.members {
		peer := "http://" + net.JoinHostPort(m.ip, strconv.Itoa(m.peerPort))
		client := "http://" + m.endpoint()
		args := []string{"--name", m.name, "--data-dir", etcdDataDir(dir, i),
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "plugreg-bench", "--log-level", "warn", "--logger", "zap"}
		args = append(args, extra...)
		m.proc = &proc{name: "etcd " + m.name, path: bin, args: args, logPath: filepath.Join(dir, "etcd-"+m.name+".log")}
	}
	for _, m := range c.members {
		if err := m.proc.start(); err != nil {
			return c, err
		}
	}
	return c, nil
}

func (c *etcdCluster) stop() {
	for _, m := range c.members {
		m.proc.stop(10 * time.Second)
	}
}

func newEtcdClient(endpoints ...string) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		// One client is one connection; 256 clients are 256 connections,
		// as 256 plugreg clients are 256 HTTP connections.
		MaxCallRecvMsgSize: 64 << 20,
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client %v: %w", endpoints, err)
	}
	return cli, nil
}

// leader returns the index of the member that leads, asking live members.
func (c *etcdCluster) leader(ctx context.Context) (int, error) {
	var lastErr error
	for _, m := range c.members {
		if !m.proc.running() {
			continue
		}
		id, lead, err := c.status(ctx, m)
		if err != nil {
			lastErr = err
			continue
		}
		if lead == 0 {
			lastErr = fmt.Errorf("%s knows no leader", m.name)
			continue
		}
		if id == lead {
			return c.index(m), nil
		}
		// Ask the others who they are.
		for j, o := range c.members {
			if !o.proc.running() {
				continue
			}
			if oid, _, err := c.status(ctx, o); err == nil && oid == lead {
				return j, nil
			}
		}
		lastErr = fmt.Errorf("leader %x is not a live member", lead)
	}
	return -1, fmt.Errorf("etcd leader: %w", lastErr)
}

func (c *etcdCluster) index(m *etcdMember) int {
	for i, o := range c.members {
		if o == m {
			return i
		}
	}
	return -1
}

func (c *etcdCluster) status(ctx context.Context, m *etcdMember) (id, leader uint64, err error) {
	cli, err := newEtcdClient(m.endpoint())
	if err != nil {
		return 0, 0, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := cli.Status(ctx, m.endpoint())
	if err != nil {
		return 0, 0, fmt.Errorf("status of %s: %w", m.name, err)
	}
	return st.Header.MemberId, st.Leader, nil
}

// waitReady waits until every running member answers Status with a leader
// and they all name the same one, and a linearizable read succeeds.
func (c *etcdCluster) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var lastErr error
	for {
		lastErr = func() error {
			leaders := map[uint64]bool{}
			for _, m := range c.members {
				_, l, err := c.status(ctx, m)
				if err != nil {
					return err
				}
				if l == 0 {
					return fmt.Errorf("%s has no leader", m.name)
				}
				leaders[l] = true
			}
			if len(leaders) != 1 {
				return errors.New("members disagree on the leader")
			}
			for _, m := range c.members {
				cli, err := newEtcdClient(m.endpoint())
				if err != nil {
					return err
				}
				rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				_, err = cli.Get(rctx, "/health-probe")
				cancel()
				cli.Close()
				if err != nil {
					return fmt.Errorf("read on %s: %w", m.name, err)
				}
			}
			return nil
		}()
		if lastErr == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcd not ready: %w (last: %v)", ctx.Err(), lastErr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// dirSize sums the sizes of the regular files under dir.
func dirSize(dir string) int64 {
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// agentHasFlag reports whether bin's agent command knows -name: a
// baseline binary may predate a flag the bench passes.
func agentHasFlag(bin, name string) bool {
	out, _ := exec.Command(bin, "agent", "-h").CombinedOutput()
	return strings.Contains(string(out), "-"+name+" ")
}
