//go:build linux

package kubernetes

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/tlsutil"
)

// The chart in a real Kubernetes, as an operator secures it: TLS, gossip
// encryption and ACLs on, every pod Ready, the servers on three nodes,
// helm test, Prometheus scraping as the monitors say, a rolling restart
// of the servers under writes and an upgrade to a new image with no
// acknowledged write lost and none failed, SDK and kubelet plugin pods,
// a kubelet stopped, a node lost whole, and an uninstall and reinstall
// that keep the generated secrets and the data.
func TestChartOnARealKubernetes(t *testing.T) {
	l := newLab(t)
	l.fresh()
	img := l.image("t1")
	busybox := os.Getenv("PLUGREG_K8S_BUSYBOX")
	if busybox == "" {
		busybox = "localhost/busybox:local" // lab.sh's
	}
	pki := l.pki()
	l.secretFromFiles("plugreg-server-tls", map[string]string{"ca.crt": pki.ca, "tls.crt": pki.serverCert, "tls.key": pki.serverKey})
	l.secretFromFiles("plugreg-client-tls", map[string]string{"ca.crt": pki.ca, "tls.crt": pki.clientCert, "tls.key": pki.clientKey})

	// The client agents' host dirs are the chart's defaults: the lab runs
	// each node's kubelet and containerd with its own /var/lib/kubelet,
	// /var/lib/plugreg and /run/plugreg (LAB_NODE_DIRS), as separate
	// hosts have them.
	set := []string{
		"image.repository=" + strings.Split(img, ":")[0], "image.tag=t1",
		"tls.enabled=true", "gossip.autoGenerate=true",
		"acl.enabled=true", "acl.bootstrapToken.autoGenerate=true",
		"server.volumePermissions.enabled=true", "server.volumePermissions.image=" + busybox,
		"client.pluginSocketGroup=2000",
	}
	nodes := l.install(set)

	operator := l.secretValue(release+"-plugreg-bootstrap-token", "token")
	c := l.client(&pki, operator)
	ctx := ctxFor(t, 30*time.Minute)

	// The client agents need a token of their own under default deny.
	agent, err := c.ACLTokenCreate(ctx, "client agents (chart)", []api.ACLPolicy{{Kind: api.ACLWrite}, {Kind: api.ACLRead}})
	if err != nil {
		t.Fatal(err)
	}
	l.run("kubectl", "-n", namespace, "create", "secret", "generic", "plugreg-agent-token", "--from-literal=token="+agent.SecretID)
	l.run("helm", "upgrade", release, "deploy/helm/plugreg", "-n", namespace, "--reuse-values", "--set", "acl.agentTokenSecret=plugreg-agent-token", "--wait", "--timeout", "5m")
	l.eventually(3*time.Minute, "a Ready client agent on every node", func() bool {
		ready, n := l.podsReady(clients)
		return ready && n == len(nodes)
	})
	members, err := c.Members(ctx)
	if err != nil || len(members) != 3+len(nodes) {
		t.Fatalf("members %d (%v): want 3 servers and %d client agents", len(members), err, len(nodes))
	}

	t.Run("helm test", func(t *testing.T) {
		l.run("helm", "test", release, "-n", namespace, "--timeout", "3m")
	})

	t.Run("Prometheus scrapes every agent as the monitors say", func(t *testing.T) {
		reader, err := c.ACLTokenCreate(ctx, "prometheus (chart)", []api.ACLPolicy{{Kind: api.ACLRead}})
		if err != nil {
			t.Fatal(err)
		}
		l.run("kubectl", "-n", namespace, "create", "secret", "generic", "plugreg-metrics-token", "--from-literal=token="+reader.SecretID)
		l.scrapeAsTheMonitorsSay(t, "plugreg-metrics-token")
	})

	t.Run("rolling restart under writes", func(t *testing.T) {
		l.rollingRestartUnderWrites(t, ctx, c)
	})

	t.Run("SDK plugin pod", func(t *testing.T) {
		l.sdkPlugin(ctx, c, "sdk-plugin", nodes[len(nodes)-1])
		l.kubectl("delete", "pod", "sdk-plugin", "--wait")
		l.eventually(time.Minute, "the SDK plugin deregistered with its pod", func() bool {
			got, _, err := c.List(ctx, "k8sdemo", nil)
			return err == nil && len(got) == 0
		})
	})

	// A stopped kubelet (crashed, or restarted by an operator) leaves its
	// node's containers running, the client agent among them: Kubernetes
	// calls the node NotReady, but plugreg's liveness is the agent's own,
	// so nothing of the node is suspect or reaped, and when the kubelet is
	// back the plugin is still the one instance it was.
	t.Run("kubelet stopped", func(t *testing.T) {
		node := nodes[len(nodes)-1]
		before := l.sdkPlugin(ctx, c, "sdk-plugin-2", node)
		start := l.labStop(t, "kubelet", node)
		ready := func() string {
			out, _ := l.try("kubectl", "get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
			return out
		}
		l.eventually(3*time.Minute, node+" NotReady", func() bool { return ready() != "True" })
		for range 20 { // 20 s more of a NotReady node
			got, _, err := c.List(ctx, "k8sdemo", nil)
			if err != nil || len(got) != 1 || got[0].ModifyIndex != before.ModifyIndex || got[0].Health != nil {
				t.Fatalf("with the kubelet stopped: %+v (%v), want the one instance unchanged and not suspect: %+v", got, err, before)
			}
			time.Sleep(time.Second)
		}
		members, err := c.Members(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range members {
			if m.Name == node && m.Status != "alive" {
				t.Fatalf("%s's client agent is %s with its kubelet stopped, want alive", node, m.Status)
			}
		}
		start()
		l.eventually(3*time.Minute, node+" Ready again", func() bool { return ready() == "True" })
		got, _, err := c.List(ctx, "k8sdemo", nil)
		if err != nil || len(got) != 1 || got[0].ModifyIndex != before.ModifyIndex {
			t.Fatalf("after the kubelet came back: %+v (%v), want the instance unchanged", got, err)
		}
		l.kubectl("delete", "pod", "sdk-plugin-2", "--wait")
	})

	t.Run("kubelet plugin pod", func(t *testing.T) {
		img := l.binaryImage("./examples/kubelet-plugin", "kubelet-plugin", "t1")
		node := nodes[0]
		l.apply(kubeletPluginPod(img, node))
		l.eventually(2*time.Minute, "the kubelet plugin registered in plugreg from "+node, func() bool {
			got, _, err := c.List(ctx, "DRAPlugin", nil)
			return err == nil && len(got) == 1 && got[0].NodeID == node && got[0].Name == "gpu.plugreg.example"
		})
		// kubelet answers the plugin (true: its DRA handler took it);
		// plugreg, in kubelet-shared mode, never does.
		l.eventually(time.Minute, "kubelet's answer in the plugin's log", func() bool {
			// The plugin may register before the pod's status says it
			// runs, and kubectl logs refuses a pod still "waiting".
			out, err := l.try("kubectl", "-n", namespace, "logs", "kubelet-plugin")
			return err == nil && strings.Contains(out, "registered by the agent")
		})
		if log := l.kubectl("logs", "kubelet-plugin"); strings.Contains(log, "refused") {
			t.Errorf("the plugin was told false:\n%s", log)
		}
		l.kubectl("delete", "pod", "kubelet-plugin", "--wait")
		l.eventually(time.Minute, "the kubelet plugin deregistered with its pod", func() bool {
			got, _, err := c.List(ctx, "DRAPlugin", nil)
			return err == nil && len(got) == 0
		})
	})

	// A node lost whole, as a power cut takes a host: its kubelet and
	// every container on it, the client agent and a server among them,
	// gone at once. Gossip fails the agent, its plugin is suspect, and
	// the leader reaps it after -node-reap-after (30 s) as the brakes
	// allow (one client agent of three failed: under the guard's 0.55);
	// the two other servers keep the quorum. Powered on, the kubelet
	// restarts the pods: the server rejoins, the agent is alive again and
	// the plugin registers anew.
	t.Run("node lost with its client agent", func(t *testing.T) {
		node := nodes[len(nodes)-1]
		l.sdkPlugin(ctx, c, "sdk-plugin-3", node)
		server := l.kubectl("get", "pods", "-l", servers, "--field-selector", "spec.nodeName="+node, "-o", "jsonpath={.items[0].metadata.name}")
		start := l.labStop(t, "node", node)
		lost := time.Now()
		status := func(name string) string {
			members, err := c.Members(ctx)
			if err != nil {
				return err.Error()
			}
			for _, m := range members {
				if m.Name == name {
					return m.Status
				}
			}
			return "absent"
		}
		l.eventually(time.Minute, node+"'s client agent and "+server+" failed", func() bool {
			return status(node) == "failed" && status(server) == "failed"
		})
		failed := time.Since(lost)
		suspect := false
		l.eventually(2*time.Minute, "the plugin on "+node+" reaped", func() bool {
			got, _, err := c.List(ctx, "k8sdemo", nil)
			if err != nil {
				return false
			}
			if len(got) == 1 && got[0].Health != nil {
				suspect = true
			}
			return len(got) == 0
		})
		t.Logf("%s lost: failed in gossip after %s, its plugin reaped after %s (suspect seen before: %v)",
			node, failed.Round(time.Second), time.Since(lost).Round(time.Second), suspect)
		if !suspect {
			t.Errorf("the plugin on the failed node was never seen suspect before it was reaped")
		}
		// The quorum held: a write through the service succeeds.
		l.eventually(time.Minute, "a write with "+server+" down", func() bool {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_, err := c.Register(wctx, &api.PluginInfo{Type: "nodelost", Name: "w", AllocID: "a", NodeID: "writer",
				ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/w.sock"}})
			return err == nil
		})
		start()
		on := time.Now()
		l.eventually(4*time.Minute, "every pod Ready after "+node+" is back", func() bool {
			s, ns := l.podsReady(servers)
			a, na := l.podsReady(clients)
			return s && ns == 3 && a && na == len(nodes)
		})
		l.eventually(2*time.Minute, node+"'s agent and "+server+" alive again", func() bool {
			return status(node) == "alive" && status(server) == "alive"
		})
		l.eventually(2*time.Minute, "the plugin registered anew on "+node, func() bool {
			got, _, err := c.List(ctx, "k8sdemo", nil)
			return err == nil && len(got) == 1 && got[0].NodeID == node && got[0].Health == nil
		})
		t.Logf("%s back: its agent and server alive and its plugin registered anew %s after the kubelet started",
			node, time.Since(on).Round(time.Second))
		l.kubectl("delete", "pod", "sdk-plugin-3", "--wait")
	})

	t.Run("upgrade to a new image under writes", func(t *testing.T) {
		l.image("t2")
		w := startWriter(t, c, "upgrade")
		time.Sleep(2 * time.Second)
		l.run("helm", "upgrade", release, "deploy/helm/plugreg", "-n", namespace, "--reuse-values", "--set", "image.tag=t2", "--wait", "--timeout", "8m")
		l.kubectl("rollout", "status", "statefulset/"+release+"-plugreg-server", "--timeout", "6m")
		time.Sleep(2 * time.Second)
		w.stopAndCheck(t, ctx, c)
		images := l.kubectl("get", "pods", "-o", "jsonpath={.items[*].spec.containers[0].image}")
		if strings.Contains(images, ":t1") {
			t.Errorf("pods still on t1 after the upgrade: %s", images)
		}
	})

	// helm uninstall keeps what a reinstall needs: the generated gossip
	// key and bootstrap token (resource-policy keep; lookup finds them),
	// the servers' claims (a StatefulSet's are never deleted with it),
	// and the client agents' keyrings in their hosts' data dirs. A second
	// install of the release takes them back: the same key and token, the
	// registry as it was, every agent a member again.
	t.Run("uninstall and install again", func(t *testing.T) {
		key := l.secretValue(release+"-plugreg-gossip", "key")
		before, _, err := c.List(ctx, "upgrade", nil)
		if err != nil || len(before) == 0 {
			t.Fatalf("before: %d instances (%v)", len(before), err)
		}
		l.run("helm", "uninstall", release, "-n", namespace, "--wait", "--timeout", "3m")
		l.eventually(2*time.Minute, "every pod of the release gone", func() bool {
			out, err := l.try("kubectl", "-n", namespace, "get", "pods", "-l", "app.kubernetes.io/instance="+release, "-o", "name")
			return err == nil && strings.TrimSpace(out) == ""
		})
		args := []string{"install", release, "deploy/helm/plugreg", "-n", namespace, "--wait", "--timeout", "5m",
			"--set", "image.tag=t2", "--set", "acl.agentTokenSecret=plugreg-agent-token"}
		for _, s := range set {
			if !strings.HasPrefix(s, "image.tag=") {
				args = append(args, "--set", s)
			}
		}
		l.run("helm", args...)
		if got := l.secretValue(release+"-plugreg-gossip", "key"); got != key {
			t.Errorf("the gossip key changed across uninstall and install")
		}
		if got := l.secretValue(release+"-plugreg-bootstrap-token", "token"); got != operator {
			t.Errorf("the bootstrap token changed across uninstall and install")
		}
		l.eventually(3*time.Minute, "every pod Ready again", func() bool {
			s, ns := l.podsReady(servers)
			a, na := l.podsReady(clients)
			return s && ns == 3 && a && na == len(nodes)
		})
		// The operator's token is the one the cluster was bootstrapped
		// with: it still reads, and the registry is what it was. The
		// service is a new one, at a new cluster IP: a new client, and a
		// deadline on every call (a pooled connection to the old IP
		// would wait on TCP's retransmissions).
		c := l.client(&pki, operator)
		call := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 10*time.Second) }
		var after []*api.PluginInfo
		l.eventually(2*time.Minute, "the registry read back with the kept token", func() bool {
			cctx, cancel := call()
			defer cancel()
			after, _, err = c.List(cctx, "upgrade", nil)
			return err == nil && len(after) == len(before)
		})
		l.eventually(2*time.Minute, "3 servers and every client agent alive", func() bool {
			cctx, cancel := call()
			defer cancel()
			members, err := c.Members(cctx)
			if err != nil {
				return false
			}
			alive := 0
			for _, m := range members {
				if m.Status == "alive" {
					alive++
				}
			}
			return alive == 3+len(nodes)
		})
	})
}

// The chart as a user gets it, with no value set but the image: TLS,
// gossip encryption and ACLs off. Every pod Ready, the servers on three
// nodes, helm test, and a rolling restart of the servers under writes.
func TestChartDefaultsOnARealKubernetes(t *testing.T) {
	l := newLab(t)
	l.fresh()
	img := l.image("t1")
	nodes := l.install([]string{"image.repository=" + strings.Split(img, ":")[0], "image.tag=t1"})
	c := l.client(nil, "")
	ctx := ctxFor(t, 10*time.Minute)
	l.eventually(3*time.Minute, "3 servers and every client agent members", func() bool {
		members, err := c.Members(ctx)
		return err == nil && len(members) == 3+len(nodes)
	})
	t.Run("helm test", func(t *testing.T) {
		l.run("helm", "test", release, "-n", namespace, "--timeout", "3m")
	})
	t.Run("rolling restart under writes", func(t *testing.T) {
		l.rollingRestartUnderWrites(t, ctx, c)
	})
}

const (
	servers = "app.kubernetes.io/component=server"
	clients = "app.kubernetes.io/component=client"
)

// fresh removes what a run before this one may have left, makes sure
// three volumes are free for the servers' claims (the lab's are Retain:
// a released one is not bound again) and creates the namespace; the
// release is uninstalled when the test ends unless PLUGREG_K8S_KEEP is
// set.
func (l *lab) fresh() {
	l.t.Helper()
	if os.Getenv("PLUGREG_K8S_KEEP") == "" {
		l.t.Cleanup(func() { l.uninstall() })
	}
	l.uninstall()
	avail := strings.Fields(l.run("kubectl", "get", "pv", "-o", `jsonpath={.items[?(@.status.phase=="Available")].metadata.name}`))
	if len(avail) < 3 {
		l.run(filepath.Join(l.repo, "compat/kubernetes/lab/lab.sh"), "pvs", fmt.Sprint(3-len(avail)))
	}
	l.run("kubectl", "create", "namespace", namespace)
}

// install installs the chart with the values set, waits for it, checks
// that the three servers are Ready on three different nodes (required
// anti-affinity) and returns the cluster's nodes.
func (l *lab) install(set []string) []string {
	l.t.Helper()
	args := []string{"install", release, "deploy/helm/plugreg", "-n", namespace, "--wait", "--timeout", "5m"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	l.run("helm", args...)
	l.kubectl("get", "pods", "-o", "wide")
	if ready, n := l.podsReady(servers); !ready || n != 3 {
		l.t.Fatalf("servers: %d, all Ready %v; want 3 Ready", n, ready)
	}
	on := strings.Fields(l.kubectl("get", "pods", "-l", servers, "-o", "jsonpath={.items[*].spec.nodeName}"))
	sort.Strings(on)
	if len(on) != 3 || on[0] == on[1] || on[1] == on[2] {
		l.t.Fatalf("servers on nodes %v: want three different nodes", on)
	}
	return strings.Fields(l.run("kubectl", "get", "nodes", "-o", "jsonpath={.items[*].metadata.name}"))
}

// sdkPlugin starts docs/kubernetes.md's plugin pod (examples/stub-plugin,
// its image built once) named name on node, waits until plugreg lists it
// from there, and returns the instance.
func (l *lab) sdkPlugin(ctx context.Context, c *client.Client, name, node string) *api.PluginInfo {
	l.t.Helper()
	if l.stubImage == "" {
		l.stubImage = l.binaryImage("./examples/stub-plugin", "stub-plugin", "t1")
	}
	l.apply(sdkPluginPod(name, l.stubImage, node))
	var got []*api.PluginInfo
	l.eventually(2*time.Minute, "the SDK plugin "+name+" registered on "+node, func() bool {
		var err error
		got, _, err = c.List(ctx, "k8sdemo", nil)
		return err == nil && len(got) == 1 && got[0].NodeID == node
	})
	return got[0]
}

// labStop runs lab.sh WHAT stop N for node lab-nodeN (WHAT: kubelet, or
// node for the whole node) and returns the start that undoes it; t's
// cleanup starts it if the test did not, so a failure leaves no node down
// for the tests after it.
func (l *lab) labStop(t *testing.T, what, node string) (start func()) {
	script := filepath.Join(l.repo, "compat/kubernetes/lab/lab.sh")
	n := node[len(node)-1:]
	l.run(script, what, "stop", n)
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { l.try(script, what, "start", n) }) })
	return func() { once.Do(func() { l.run(script, what, "start", n) }) }
}

// rollingRestartUnderWrites restarts the servers (kubectl rollout
// restart) while a writer registers, logs where the time went, and
// checks that no acknowledged write is lost and none failed.
func (l *lab) rollingRestartUnderWrites(t *testing.T, ctx context.Context, c *client.Client) {
	w := startWriter(t, c, "restart")
	time.Sleep(2 * time.Second)
	began := time.Now()
	l.kubectl("rollout", "restart", "statefulset/"+release+"-plugreg-server")
	l.kubectl("rollout", "status", "statefulset/"+release+"-plugreg-server", "--timeout", "6m")
	l.logServerTimeline(t, began)
	time.Sleep(2 * time.Second)
	w.stopAndCheck(t, ctx, c)
}

// writer registers an instance every 20 ms through the client until
// stopped, recording what was acknowledged and what failed.
type writer struct {
	stop   context.CancelFunc
	done   chan struct{}
	typ    string
	mu     sync.Mutex
	acked  []string
	failed []string
}

func startWriter(t *testing.T, c *client.Client, typ string) *writer {
	ctx, cancel := context.WithCancel(context.Background())
	w := &writer{stop: cancel, done: make(chan struct{}), typ: typ}
	go func() {
		defer close(w.done)
		for i := 0; ctx.Err() == nil; i++ {
			name := fmt.Sprintf("w%05d", i)
			wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
			_, err := c.Register(wctx, &api.PluginInfo{Type: typ, Name: name, AllocID: "a", NodeID: "writer",
				ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/" + name + ".sock"}})
			wcancel()
			w.mu.Lock()
			switch {
			case err == nil:
				w.acked = append(w.acked, name)
			case ctx.Err() == nil:
				w.failed = append(w.failed, fmt.Sprintf("%s: %v", name, err))
			}
			w.mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return w
}

// stopAndCheck stops the writer and checks that every acknowledged
// write is in the registry and none failed.
func (w *writer) stopAndCheck(t *testing.T, ctx context.Context, c *client.Client) {
	t.Helper()
	w.stop()
	<-w.done
	got, _, err := c.List(ctx, w.typ, nil)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, p := range got {
		have[p.Name] = true
	}
	lost := 0
	for _, name := range w.acked {
		if !have[name] {
			lost++
		}
	}
	t.Logf("%s: %d writes acknowledged, %d failed, %d acknowledged writes missing", w.typ, len(w.acked), len(w.failed), lost)
	if lost > 0 {
		t.Errorf("%d acknowledged writes lost", lost)
	}
	if len(w.failed) > 0 {
		t.Errorf("%d writes failed, the first: %s", len(w.failed), w.failed[0])
	}
	if len(w.acked) < 50 {
		t.Errorf("only %d writes acknowledged: the writer did not run", len(w.acked))
	}
}

// pki is a CA and the servers' and clients' certificates, made with the
// CLI as docs/security.md tells an operator to.
type pki struct {
	ca, serverCert, serverKey, clientCert, clientKey string
}

func (l *lab) pki() pki {
	l.t.Helper()
	dir := l.t.TempDir()
	bin := filepath.Join(dir, "plugreg")
	l.run("go", "build", "-o", bin, "./cmd/plugreg")
	l.run(bin, "tls", "ca", "create", "-dir", dir)
	l.run(bin, "tls", "cert", "create", "-server", "-dir", dir)
	l.run(bin, "tls", "cert", "create", "-client", "-dir", dir)
	glob := func(pattern string) string {
		m, _ := filepath.Glob(filepath.Join(dir, pattern))
		if len(m) != 1 {
			l.t.Fatalf("%s: %v, want one file", pattern, m)
		}
		return m[0]
	}
	return pki{
		ca:         glob("plugreg-agent-ca.pem"),
		serverCert: glob("*-server-plugreg-0.pem"), serverKey: glob("*-server-plugreg-0-key.pem"),
		clientCert: glob("*-client-plugreg-0.pem"), clientKey: glob("*-client-plugreg-0-key.pem"),
	}
}

func (l *lab) secretFromFiles(name string, files map[string]string) {
	l.t.Helper()
	args := []string{"-n", namespace, "create", "secret", "generic", name}
	for key, path := range files {
		args = append(args, "--from-file="+key+"="+path)
	}
	l.run("kubectl", args...)
}

func (l *lab) secretValue(name, key string) string {
	l.t.Helper()
	enc := l.kubectl("get", "secret", name, "-o", "jsonpath={.data."+key+"}")
	b, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		l.t.Fatalf("secret %s key %s: %v", name, key, err)
	}
	return string(b)
}

// client is a Go client of the chart's API service (its cluster IP,
// which kube-proxy routes from this host), over mutual TLS with a pki,
// in the clear without.
func (l *lab) client(p *pki, token string) *client.Client {
	l.t.Helper()
	ip := l.kubectl("get", "service", release+"-plugreg", "-o", "jsonpath={.spec.clusterIP}")
	cfg := client.Config{Addrs: []string{"http://" + ip + ":7700"}, Token: token}
	if p != nil {
		cfg.Addrs = []string{"https://" + ip + ":7700"}
		cfg.TLSOptions = tlsutil.ClientOptions{CAFile: p.ca, CertFile: p.clientCert, KeyFile: p.clientKey, ServerName: "server.global.plugreg"}
	}
	c, err := client.New(cfg)
	if err != nil {
		l.t.Fatal(err)
	}
	return c
}

func (l *lab) apply(manifest string) {
	l.t.Helper()
	f := filepath.Join(l.t.TempDir(), "manifest.yaml")
	if err := os.WriteFile(f, []byte(manifest), 0o600); err != nil {
		l.t.Fatal(err)
	}
	l.kubectl("apply", "-f", f)
}

// uninstall removes the release, its claims and the namespace, and
// empties the client agents' data dirs on every node (the lab keeps
// each node's /var/lib/plugreg in state/nodeN/root): the namespace took
// the generated gossip key with it, and a keyring left in a data dir
// wins over the next install's key (docs/kubernetes.md, Limits).
func (l *lab) uninstall() {
	l.try("helm", "uninstall", release, "-n", namespace, "--wait", "--timeout", "3m")
	l.try("kubectl", "delete", "namespace", namespace, "--wait", "--timeout", "3m")
	dirs, _ := filepath.Glob(filepath.Join(l.home, "state", "node*", "root", "var", "lib", "plugreg", "*"))
	for _, d := range dirs {
		os.RemoveAll(d)
	}
}

// sdkPluginPod is docs/kubernetes.md's plugin pod, as a bare pod on one
// node: examples/stub-plugin, not root, with the socket's group, the
// socket's host dir mounted and its path in PLUGREG_PLUGIN_SOCKET.
func sdkPluginPod(name, image, node string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: %s
spec:
  nodeName: %s
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 10
  securityContext:
    runAsNonRoot: true
    runAsUser: 10001
    supplementalGroups: [2000]
    seccompProfile: {type: RuntimeDefault}
  containers:
    - name: plugin
      image: %s
      imagePullPolicy: Never
      args: ["-type", "k8sdemo", "-name", "demo"]
      env:
        - name: NODE_NAME
          valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
        - name: PLUGREG_PLUGIN_SOCKET
          value: /var/run/plugreg/plugin.sock
      securityContext:
        readOnlyRootFilesystem: true
        allowPrivilegeEscalation: false
        capabilities: {drop: ["ALL"]}
      volumeMounts:
        - name: plugreg
          mountPath: /var/run/plugreg
  volumes:
    - name: plugreg
      hostPath: {path: /var/run/plugreg, type: Directory}
`, name, namespace, node, image)
}

// kubeletPluginPod is a plugin of the kubelet registration protocol
// (examples/kubelet-plugin, a DRA driver's registration) on one node: its
// registration socket in the node's kubelet plugins_registry, which
// kubelet and the node's client agent both watch. It runs as root, as
// kubelet plugins do: the dir is root's.
func kubeletPluginPod(image, node string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: kubelet-plugin
  namespace: %s
spec:
  nodeName: %s
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 10
  containers:
    - name: plugin
      image: %s
      imagePullPolicy: Never
      args: ["-dir", "/var/lib/kubelet/plugins_registry", "-type", "DRAPlugin", "-name", "gpu.plugreg.example", "-versions", "v1.DRAPlugin"]
      securityContext:
        readOnlyRootFilesystem: true
        allowPrivilegeEscalation: false
        seccompProfile: {type: RuntimeDefault}
      volumeMounts:
        - name: registry
          mountPath: /var/lib/kubelet/plugins_registry
  volumes:
    - name: registry
      hostPath: {path: /var/lib/kubelet/plugins_registry, type: Directory}
`, namespace, node, image)
}
