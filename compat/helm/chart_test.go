//go:build linux

package helm

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/tests/framework/otlptest"
	"github.com/plugreg/plugreg/tests/framework/proctest"
	"github.com/plugreg/plugreg/tests/framework/testpki"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// TestMain removes the binaries proctest built after the tests.
func TestMain(m *testing.M) { proctest.Main(m) }

const (
	chartDir  = "../../deploy/helm/plugreg"
	release   = "reg"
	namespace = "plugins"
)

// valueSets are the configurations the tests render: the defaults, and
// every switch on.
var valueSets = map[string]map[string]any{
	"defaults": {"image": testImage},
	"secure": {
		"image":          testImage,
		"tls":            map[string]any{"enabled": true},
		"gossip":         map[string]any{"encryptionSecret": "plugreg-gossip"},
		"acl":            map[string]any{"enabled": true, "agentTokenSecret": "plugreg-agent-token", "testTokenSecret": "plugreg-test-token"},
		"serviceMonitor": map[string]any{"enabled": true, "tokenSecret": "plugreg-metrics-token"},
		"snapshot":       map[string]any{"enabled": true, "tokenSecret": "plugreg-snapshot-token"},
		"prometheusRule": map[string]any{"enabled": true},
		"server":         map[string]any{"replicas": 5},
		"tracing":        map[string]any{"endpoint": "http://otel-collector.observability:4318", "sampleRate": 0.01},
	},
}

// testImage is the image the value sets name: the chart names none by
// default (none is published).
var testImage = map[string]any{"repository": "registry.example/plugreg", "tag": "test"}

// TestChartLints: `helm lint` (Helm's lint package) finds no warning or
// error in any value set.
func TestChartLints(t *testing.T) {
	for name, vals := range valueSets {
		t.Run(name, func(t *testing.T) {
			res := lint.AllWithKubeVersion(chartDir, vals, namespace, nil)
			for _, m := range res.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("%s", m)
				}
			}
		})
	}
}

// manifests renders the chart with vals and returns its workloads.
type manifests struct {
	servers *appsv1.StatefulSet
	clients *appsv1.DaemonSet
	kinds   []string
	docs    map[string][]string // every document, by kind
}

func render(t *testing.T, vals map[string]any) manifests {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: release, Namespace: namespace, IsInstall: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.Render(ch, rv)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	var m manifests
	for name, body := range files {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		for _, doc := range strings.Split(body, "\n---") {
			if strings.TrimSpace(doc) == "" || strings.TrimSpace(strings.Join(nonComments(doc), "")) == "" {
				continue
			}
			var meta struct{ Kind string }
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s: %v\n%s", name, err, doc)
			}
			m.kinds = append(m.kinds, meta.Kind)
			if m.docs == nil {
				m.docs = map[string][]string{}
			}
			m.docs[meta.Kind] = append(m.docs[meta.Kind], doc)
			switch meta.Kind {
			case "StatefulSet":
				m.servers = new(appsv1.StatefulSet)
				if err := yaml.UnmarshalStrict([]byte(doc), m.servers); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
			case "DaemonSet":
				m.clients = new(appsv1.DaemonSet)
				if err := yaml.UnmarshalStrict([]byte(doc), m.clients); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
			}
		}
	}
	if m.servers == nil || m.clients == nil {
		t.Fatalf("rendered %v: want a StatefulSet and a DaemonSet", m.kinds)
	}
	return m
}

func nonComments(doc string) []string {
	var out []string
	for _, l := range strings.Split(doc, "\n") {
		if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
			out = append(out, l)
		}
	}
	return out
}

// What can be checked without a cluster, in every value set: each mount
// names a volume of the pod (or a claim template), each path an agent
// flag names is under a mount, each probe's port is a container port,
// each variable an argument uses is in the environment, each secret
// named comes from the values.
func TestManifestsAgree(t *testing.T) {
	for name, vals := range valueSets {
		t.Run(name, func(t *testing.T) {
			m := render(t, vals)
			if want := []string{"PodDisruptionBudget", "Service", "StatefulSet", "DaemonSet"}; !containsAll(m.kinds, want) {
				t.Errorf("kinds %v, want at least %v", m.kinds, want)
			}
			if sm := vals["serviceMonitor"] != nil; sm != containsAll(m.kinds, []string{"ServiceMonitor", "PodMonitor"}) {
				t.Errorf("kinds %v with serviceMonitor %v", m.kinds, sm)
			}
			var claims []string
			for _, c := range m.servers.Spec.VolumeClaimTemplates {
				claims = append(claims, c.Name)
			}
			checkPod(t, "server", m.servers.Spec.Template.Spec, claims)
			checkPod(t, "client", m.clients.Spec.Template.Spec, nil)
			if m.servers.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
				t.Error("servers not started in parallel: -bootstrap-expect would wait for a pod that waits for it")
			}
		})
	}
}

func checkPod(t *testing.T, what string, pod corev1.PodSpec, claims []string) {
	t.Helper()
	if len(pod.Containers) != 1 {
		t.Fatalf("%s: %d containers", what, len(pod.Containers))
	}
	c := pod.Containers[0]
	volumes := slices.Clone(claims)
	for _, v := range pod.Volumes {
		volumes = append(volumes, v.Name)
	}
	var mounts []string
	for _, vm := range c.VolumeMounts {
		if !slices.Contains(volumes, vm.Name) {
			t.Errorf("%s: mount %s of no volume", what, vm.Name)
		}
		mounts = append(mounts, vm.MountPath)
	}
	for i, a := range c.Args {
		if !strings.HasPrefix(a, "/") || i == 0 || !strings.HasPrefix(c.Args[i-1], "-") {
			continue
		}
		under := false
		for _, mp := range mounts {
			if a == mp || strings.HasPrefix(a, mp+"/") {
				under = true
			}
		}
		if !under {
			t.Errorf("%s: %s %s is on no volume (the root filesystem is read-only)", what, c.Args[i-1], a)
		}
	}
	env := map[string]bool{}
	secret := map[string]bool{} // variables a Secret fills
	for _, e := range c.Env {
		env[e.Name] = true
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			secret[e.Name] = true
		}
	}
	for _, a := range c.Args {
		for _, ref := range varRef.FindAllStringSubmatch(a, -1) {
			if !env[ref[1]] {
				t.Errorf("%s: argument %q uses $(%s), which is not in the environment", what, a, ref[1])
			}
			// Kubernetes expands it into the process's arguments, which
			// every user of the node reads (/proc/PID/cmdline).
			if secret[ref[1]] {
				t.Errorf("%s: argument %q puts the Secret in $(%s) on the command line", what, a, ref[1])
			}
		}
	}
	ports := map[string]bool{}
	for _, p := range c.Ports {
		ports[p.Name] = true
	}
	for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		switch {
		case p == nil:
			t.Errorf("%s: no %s probe", what, name)
		case p.HTTPGet != nil && !ports[p.HTTPGet.Port.StrVal]:
			t.Errorf("%s: %s probe on port %v, not a container port", what, name, p.HTTPGet.Port)
		case p.TCPSocket != nil && !ports[p.TCPSocket.Port.StrVal]:
			t.Errorf("%s: %s probe on port %v, not a container port", what, name, p.TCPSocket.Port)
		}
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("%s: the root filesystem is not read-only", what)
	}
}

var varRef = regexp.MustCompile(`\$\(([A-Z_]+)\)`)

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// The chart's default agents, started as real processes from exactly the
// arguments and environment the rendered manifests give them: three
// servers (the StatefulSet's pods, 127.0.0.1-3, the same ports each, as
// pods have their own IPs) and a client agent (the DaemonSet's pod on one
// node, 127.0.0.4). Two things stand in for Kubernetes: the data volume
// mounted at /data becomes a directory of the test's, and the servers'
// DNS names in the headless service become their addresses (the
// arguments are otherwise unchanged: an argument the binary does not take
// stops it at once). They form a cluster; every probe is answered by its
// agent (readiness 200 once a leader is known, on the probe port); each
// stops on SIGTERM. With TLS off and on: on, the API takes only HTTPS
// with a client certificate, and the readiness probe, which has none,
// still sees whether a leader is known.
func TestAgentsStartAsTheManifestsSay(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four agents")
	}
	bin := proctest.Build(t, "./cmd/plugreg")
	for _, tls := range []bool{false, true} {
		t.Run(fmt.Sprintf("tls=%v", tls), func(t *testing.T) {
			startPods(t, podsOptions{tls: tls}, func(pod corev1.PodSpec) []string { return []string{bin} })
		})
	}
}

// podsOptions are what startPods turns on beyond the defaults.
type podsOptions struct {
	// tls: the chart's tls.enabled, with certificates of a test CA in
	// the Secrets' mount (servers a server certificate, client agents a
	// client one), as cert-manager would put them there.
	tls bool
}

// startPods renders the default chart (with tracing on, to a receiver
// here), starts its pods' agents with the command run(pod) gives (the
// binary, or the image's entrypoint as its user) followed by the
// container's arguments, and checks them as TestAgentsStartAsTheManifestsSay
// says; and that a traced write's spans reach the collector from every
// agent, under its pod's or node's name;
// with gossip encrypted by a Secret's key, which each agent reads from its
// environment.
func startPods(t *testing.T, opts podsOptions, run func(corev1.PodSpec) []string) {
	t.Helper()
	dir := t.TempDir()
	// The image's user must reach its data dirs.
	for d := dir; d != filepath.Dir(d) && strings.HasPrefix(d, os.TempDir()+"/"); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ports := proctest.FreePorts(t, "127.0.0.1", 4)
	rcv := otlptest.Start(t)
	// The Secrets the pods read, as the cluster would hold them.
	key := make([]byte, 32)
	rand.Read(key)
	secrets := map[string]string{"plugreg-gossip/key": base64.StdEncoding.EncodeToString(key)}
	vals := map[string]any{
		"ports":   map[string]any{"http": ports[0], "server": ports[1], "gossip": ports[2], "probe": ports[3]},
		"tracing": map[string]any{"endpoint": rcv.URL, "sampleRate": 1},
		"gossip":  map[string]any{"encryptionSecret": "plugreg-gossip"},
		"client": map[string]any{
			"pluginsRegistryDir": filepath.Join(dir, "kubelet", "plugins_registry"),
			"pluginSocketDir":    filepath.Join(dir, "run-plugreg"),
		},
	}
	for _, d := range []string{"kubelet/plugins_registry", "run-plugreg"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var ca *testpki.CA
	if opts.tls {
		vals["tls"] = map[string]any{"enabled": true}
		ca = testpki.New(t, "chart")
	}
	vals["image"] = testImage
	vals["snapshot"] = map[string]any{"enabled": true, "retain": 2}
	// With TLS, ACLs on too (default allow), bootstrapped by the servers
	// with the token the chart generates; without, the chart's defaults
	// (no ACLs), which users get without values.
	if opts.tls {
		vals["acl"] = map[string]any{"enabled": true, "bootstrapToken": map[string]any{"autoGenerate": true}}
	}
	m := render(t, vals)
	// The Secrets the chart makes, as the cluster would hold them.
	for _, doc := range m.docs["Secret"] {
		var sec corev1.Secret
		if err := yaml.Unmarshal([]byte(doc), &sec); err != nil {
			t.Fatal(err)
		}
		for k, v := range sec.Data {
			secrets[sec.Name+"/"+k] = string(v)
		}
	}
	bootstrap := secrets[release+"-plugreg-bootstrap-token/token"]
	if (bootstrap != "") != opts.tls {
		t.Fatalf("bootstrap token Secret %v among %v, want one with ACLs on (tls=%v)", bootstrap != "", m.kinds, opts.tls)
	}
	serverIP := func(i int) string { return fmt.Sprintf("127.0.0.%d", i+1) }
	// The headless service's names, as the servers' joins give them.
	dns := map[string]string{}
	for i := range int(*m.servers.Spec.Replicas) {
		dns[fmt.Sprintf("%s-plugreg-server-%d.%s-plugreg-server.%s.svc", release, i, release, namespace)] = serverIP(i)
	}

	type pod struct {
		name, ip string
		spec     corev1.PodSpec
		env      map[string]string // what the downward API gives
	}
	var pods []pod
	for i := range int(*m.servers.Spec.Replicas) {
		name := fmt.Sprintf("%s-%d", m.servers.Name, i)
		pods = append(pods, pod{name, serverIP(i), m.servers.Spec.Template.Spec, map[string]string{"POD_NAME": name}})
	}
	pods = append(pods, pod{"node-a", "127.0.0.4", m.clients.Spec.Template.Spec, map[string]string{"NODE_NAME": "node-a"}})

	var (
		procs   []*proctest.Proc
		podEnvs [][]string // each pod's environment, its Secrets' mounts where the test put them
	)
	for _, p := range pods {
		c := p.spec.Containers[0]
		env := map[string]string{"POD_IP": p.ip}
		for k, v := range p.env {
			env[k] = v
		}
		for _, e := range c.Env {
			switch {
			case e.ValueFrom == nil:
				env[e.Name] = expand(e.Value, env)
			case e.ValueFrom.SecretKeyRef != nil:
				ref := e.ValueFrom.SecretKeyRef
				v, ok := secrets[ref.Name+"/"+ref.Key]
				if !ok {
					t.Fatalf("%s: %s from Secret %s key %s, which the test does not make", p.name, e.Name, ref.Name, ref.Key)
				}
				env[e.Name] = v
			}
		}
		// The data volume, its owner the pod's user (fsGroup's effect).
		data := filepath.Join(dir, p.name, "data")
		if err := os.MkdirAll(data, 0o700); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Dir(data), 0o755)
		if sc := p.spec.SecurityContext; sc != nil && sc.RunAsUser != nil {
			if err := os.Chown(data, int(*sc.RunAsUser), int(*sc.RunAsUser)); err != nil {
				t.Fatal(err)
			}
		}
		// The TLS Secret's mount: a certificate of the pod's role.
		tlsDir := filepath.Join(dir, p.name, "tls")
		if ca != nil {
			f := ca.Client("")
			if p.env["POD_NAME"] != "" {
				f = ca.Server("")
			}
			if err := os.MkdirAll(tlsDir, 0o700); err != nil {
				t.Fatal(err)
			}
			for name, src := range map[string]string{"ca.crt": ca.CAFile, "tls.crt": f.Cert, "tls.key": f.Key} {
				b, err := os.ReadFile(src)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(tlsDir, name), b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
		}
		var args []string
		for _, a := range c.Args {
			a = expand(a, env)
			if a == "/data" {
				a = data
			}
			if rest, ok := strings.CutPrefix(a, "/etc/plugreg/tls/"); ok && ca != nil {
				a = filepath.Join(tlsDir, rest)
			}
			for name, ip := range dns {
				a = strings.Replace(a, name+":", ip+":", 1)
			}
			args = append(args, a)
		}
		var envList []string
		for k, v := range env {
			if rest, ok := strings.CutPrefix(v, "/etc/plugreg/tls/"); ok && ca != nil {
				v = filepath.Join(tlsDir, rest)
			}
			envList = append(envList, k+"="+v)
		}
		podEnvs = append(podEnvs, envList)
		cmd := run(p.spec)
		pr := proctest.New(p.name, cmd[0], filepath.Join(dir, p.name+".log"), append(cmd[1:], args...)...)
		pr.Env = envList
		pr.Start(t)
		procs = append(procs, pr)
		t.Cleanup(func() {
			pr.Stop(t)
		})
		t.Logf("%s: %s", p.name, strings.Join(append(cmd, args...), " "))
	}

	// Every probe of every pod, as kubelet would make it, until each
	// passes: readiness needs a leader, so this waits for the cluster.
	deadline := time.Now().Add(90 * time.Second)
	for i, p := range pods {
		c := p.spec.Containers[0]
		for name, probe := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
			port := portOf(t, c, probe)
			for {
				err := check(probe, p.ip, port)
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					log, _ := os.ReadFile(procs[i].LogPath)
					t.Fatalf("%s: %s probe: %v\n%s", p.name, name, err, tail(string(log), 20))
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
	}
	// They are one cluster: the client agent's members are all four.
	hc, scheme := http.DefaultClient, "http"
	if ca != nil {
		// The API wants a client certificate of the cluster's CA.
		f := ca.Client("")
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			t.Fatal(err)
		}
		pem, err := os.ReadFile(ca.CAFile)
		if err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(pem)
		hc = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: roots, ServerName: "localhost"}}}
		scheme = "https"
		// Without one, nothing but the probe port answers.
		if resp, err := http.Get(fmt.Sprintf("http://%s:%d/v1/members", pods[3].ip, ports[0])); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Fatal("the API answered plain HTTP with TLS on")
			}
		}
	}
	// With ACLs on (default deny), reading members takes a token.
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("%s://%s:%d/v1/members", scheme, pods[3].ip, ports[0]), nil)
	if err != nil {
		t.Fatal(err)
	}
	if bootstrap != "" {
		req.Header.Set("X-Plugreg-Token", bootstrap)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var members []struct{ Name string }
	if err := jsonDecode(resp, &members); err != nil || len(members) != 4 {
		t.Fatalf("members %+v (%v), want the three servers and the client agent", members, err)
	}
	// The CLI in each pod, as kubectl exec runs it there (the NOTES'
	// command): its environment alone reaches its own agent, with TLS on
	// over HTTPS, verified by the CA, with the pod's certificate.
	for i, p := range pods {
		cmd := run(p.spec)
		cli := exec.Command(cmd[0], append(cmd[1:], "members", "-format", "json")...)
		cli.Env = podEnvs[i]
		if bootstrap != "" {
			cli.Env = append(cli.Env, "PLUGREG_TOKEN="+bootstrap) // the NOTES: with ACLs on, a token
		}
		out, err := cli.CombinedOutput()
		var ms []struct{ Name string }
		if err == nil {
			err = json.Unmarshal(out, &ms)
		}
		if err != nil || len(ms) != 4 {
			t.Errorf("%s: plugreg members in the pod: %v\n%s", p.name, err, out)
		}
	}
	// The servers bootstrapped ACLs with the generated Secret's token,
	// read from their environment: it is an operator token.
	if bootstrap != "" {
		checkOperatorToken(t, hc, fmt.Sprintf("%s://%s:%d/v1/acl/token/self", scheme, pods[0].ip, ports[0]), bootstrap)
	}
	// The snapshot CronJob's container, run as its pod would run it (its
	// arguments and environment, the API service's name resolved to a
	// server, /snapshots a directory of the test's) three times: each
	// run saves a backup the CLI can inspect, and -retain keeps two.
	var cron batchv1.CronJob
	if docs := m.docs["CronJob"]; len(docs) != 1 {
		t.Fatalf("kinds %v: want one CronJob", m.kinds)
	} else if err := yaml.UnmarshalStrict([]byte(docs[0]), &cron); err != nil {
		t.Fatal(err)
	}
	job := cron.Spec.JobTemplate.Spec.Template.Spec
	snapshots := filepath.Join(dir, "snapshots")
	if err := os.MkdirAll(snapshots, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(snapshots, 0o777) // the image's user writes there
	service := fmt.Sprintf("%s-plugreg.%s.svc", release, namespace)
	// Its token volume: the Secret it names, mounted as a file.
	tokenMount := filepath.Join(dir, "snapshot-token")
	for _, v := range job.Volumes {
		if v.Name == "token" && v.Secret != nil {
			os.MkdirAll(tokenMount, 0o755)
			if err := os.WriteFile(filepath.Join(tokenMount, "token"), []byte(secrets[v.Secret.SecretName+"/token"]), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range 3 {
		// A write between saves: two saves of one index in one second are
		// one file.
		wr, err := hc.Post(fmt.Sprintf("%s://%s:%d/v1/plugins", scheme, pods[3].ip, ports[0]), "application/json",
			strings.NewReader(fmt.Sprintf(`{"Type":"csi","Name":"backed-up","AllocID":"a%d","ConnectionInfo":{"SocketPath":"/run/b.sock"}}`, i)))
		if err != nil {
			t.Fatal(err)
		}
		wr.Body.Close()
		var env []string
		for _, e := range job.Containers[0].Env {
			v := strings.Replace(e.Value, service, serverIP(0), 1)
			if rest, ok := strings.CutPrefix(v, "/etc/plugreg/tls/"); ok && ca != nil {
				v = filepath.Join(dir, pods[3].name, "tls", rest) // a client certificate, as the Secret holds
			}
			if rest, ok := strings.CutPrefix(v, "/etc/plugreg/token/"); ok {
				v = filepath.Join(tokenMount, rest)
			}
			env = append(env, e.Name+"="+v)
		}
		var args []string
		for _, a := range job.Containers[0].Args {
			args = append(args, strings.Replace(a, "/snapshots", snapshots, 1))
		}
		cmd := run(job)
		save := exec.Command(cmd[0], append(cmd[1:], args...)...)
		save.Env = env
		if out, err := save.CombinedOutput(); err != nil {
			t.Fatalf("the snapshot CronJob's container: %v\n%s", err, out)
		}
		// A file's name is its second and index: two saves of one index
		// in one second are one backup (with ACLs in default deny nothing
		// writes between them here), as a schedule never makes them.
		time.Sleep(1100 * time.Millisecond)
	}
	kept, _ := filepath.Glob(filepath.Join(snapshots, "plugreg-*.snap"))
	if len(kept) != 2 {
		t.Fatalf("after three scheduled saves with retain 2: %v", kept)
	}
	if out, err := exec.Command(run(job)[0], append(run(job)[1:], "snapshot", "inspect", kept[1])...).CombinedOutput(); err != nil {
		t.Fatalf("inspect %s: %v\n%s", kept[1], err, out)
	}
	// Each gossips encrypted with the Secret's key, which it read from its
	// environment (never its arguments): its keyring holds it.
	for _, p := range pods {
		kr, err := os.ReadFile(filepath.Join(dir, p.name, "data", "gossip.keyring"))
		if err != nil || !strings.Contains(string(kr), secrets["plugreg-gossip/key"]) {
			t.Errorf("%s: gossip keyring %q (%v), want the Secret's key", p.name, kr, err)
		}
	}
	// A write through the client agent is one trace whose spans reach
	// the collector from every agent, each named as its pod or node.
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	req, err = http.NewRequest(http.MethodPost, fmt.Sprintf("%s://%s:%d/v1/plugins", scheme, pods[3].ip, ports[0]),
		strings.NewReader(`{"Type":"csi","Name":"traced","AllocID":"a1","NodeID":"node-a","ConnectionInfo":{"SocketPath":"/run/t.sock"}}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	if bootstrap != "" {
		req.Header.Set("X-Plugreg-Token", bootstrap)
	}
	wresp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	wresp.Body.Close()
	if wresp.StatusCode != http.StatusOK {
		t.Fatalf("traced write: %s", wresp.Status)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		nodes := map[string]bool{}
		for _, s := range rcv.Spans(traceID) {
			nodes[s.Node] = true
		}
		missing := ""
		for _, p := range pods {
			if node := p.env["POD_NAME"] + p.env["NODE_NAME"]; !nodes[node] {
				missing = node
			}
		}
		if missing == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no span from %s reached the collector (spans from %v)", missing, nodes)
		}
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func expand(s string, env map[string]string) string {
	return varRef.ReplaceAllStringFunc(s, func(ref string) string {
		if v, ok := env[ref[2:len(ref)-1]]; ok {
			return v
		}
		return ref
	})
}

func portOf(t *testing.T, c corev1.Container, p *corev1.Probe) int32 {
	t.Helper()
	name := ""
	if p.HTTPGet != nil {
		name = p.HTTPGet.Port.StrVal
	} else if p.TCPSocket != nil {
		name = p.TCPSocket.Port.StrVal
	}
	for _, cp := range c.Ports {
		if cp.Name == name {
			return cp.ContainerPort
		}
	}
	t.Fatalf("probe port %q is not a container port", name)
	return 0
}

// check makes one probe as kubelet would.
func check(p *corev1.Probe, ip string, port int32) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if p.HTTPGet != nil {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s:%d%s", ip, port, p.HTTPGet.Path), nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode >= 400 {
			return fmt.Errorf("GET %s: %s", p.HTTPGet.Path, resp.Status)
		}
		return nil
	}
	var d netDialer
	conn, err := d.DialContext(ctx, "tcp", fmt.Sprintf("%s:%d", ip, port))
	if err != nil {
		return err
	}
	return conn.Close()
}

// checkOperatorToken waits until url (an agent's /v1/acl/token/self)
// answers for token with the one operator policy.
func checkOperatorToken(t *testing.T, hc *http.Client, url, token string) {
	t.Helper()
	self, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	self.Header.Set("X-Plugreg-Token", token)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		resp, err := hc.Do(self)
		var tok struct{ Policies []struct{ Kind string } }
		if err == nil {
			err = jsonDecode(resp, &tok)
			resp.Body.Close()
			if err == nil && resp.StatusCode == http.StatusOK && len(tok.Policies) == 1 && tok.Policies[0].Kind == "operator" {
				return
			}
			err = fmt.Errorf("%s %+v %v", resp.Status, tok, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the token at %s: %v", url, err)
		}
	}
}
