//go:build linux

package kubernetes

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/tests/framework/grafanadash"
	"sigs.k8s.io/yaml"
)

// monitor is what the test reads of a ServiceMonitor or PodMonitor the
// chart renders: the pods it selects and how it scrapes them.
type monitor struct {
	Kind string
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		}
		Endpoints           []endpoint `json:"endpoints"`
		PodMetricsEndpoints []endpoint `json:"podMetricsEndpoints"`
	}
}

type secretKey struct{ Name, Key string }

type endpoint struct {
	Port, Path, Scheme string
	TLSConfig          *struct {
		ServerName string `json:"serverName"`
		CA         struct{ Secret secretKey }
		Cert       struct{ Secret secretKey }
		KeySecret  secretKey `json:"keySecret"`
	} `json:"tlsConfig"`
	BearerTokenSecret *secretKey `json:"bearerTokenSecret"`
	Relabelings       []struct {
		TargetLabel string `json:"targetLabel"`
		Replacement string
	}
}

// scrapeAsTheMonitorsSay renders the chart's ServiceMonitor and
// PodMonitor with the release's values, turns each into the scrape job
// prometheus-operator would make of it (the pods it selects, its scheme,
// TLS files and bearer token from the Secrets it names, its job label),
// and runs Debian's Prometheus on them until every target is up.
// Debian's build has no kubernetes_sd_configs, so the test resolves the
// monitors' selectors with kubectl and hands Prometheus the targets: what
// is tested is the chart's scrape settings against the real agents.
func (l *lab) scrapeAsTheMonitorsSay(t *testing.T, tokenSecret string) {
	prom, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatal("Debian's prometheus is not installed (apt-get install prometheus)")
	}
	dir := t.TempDir()
	values := filepath.Join(dir, "values.yaml")
	if err := os.WriteFile(values, []byte(l.run("helm", "get", "values", release, "-n", namespace, "-o", "yaml")), 0o600); err != nil {
		t.Fatal(err)
	}
	rendered := l.run("helm", "template", release, "deploy/helm/plugreg", "-n", namespace, "-f", values,
		"--set", "serviceMonitor.enabled=true", "--set", "serviceMonitor.tokenSecret="+tokenSecret,
		"--show-only", "templates/servicemonitor.yaml")
	var jobs []string
	targets := 0
	for i, doc := range strings.Split(rendered, "\n---") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var m monitor
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatalf("monitor %d: %v", i, err)
		}
		eps := append(m.Spec.Endpoints, m.Spec.PodMetricsEndpoints...)
		if len(eps) != 1 {
			t.Fatalf("%s: %d endpoints, want 1", m.Kind, len(eps))
		}
		ep := eps[0]
		var sel []string
		for k, v := range m.Spec.Selector.MatchLabels {
			sel = append(sel, k+"="+v)
		}
		// A ServiceMonitor selects services and scrapes their pods; the
		// chart's services select the pods by the same labels.
		ips := strings.Fields(l.kubectl("get", "pods", "-l", strings.Join(sel, ","), "-o", "jsonpath={.items[*].status.podIP}"))
		port := l.kubectl("get", "pods", "-l", strings.Join(sel, ","), "-o",
			fmt.Sprintf(`jsonpath={.items[0].spec.containers[0].ports[?(@.name=="%s")].containerPort}`, ep.Port))
		job := m.Kind
		for _, r := range ep.Relabelings {
			if r.TargetLabel == "job" {
				job = r.Replacement
			}
		}
		var cfg strings.Builder
		fmt.Fprintf(&cfg, "  - job_name: %s\n    metrics_path: %s\n    scheme: %s\n", job, ep.Path, ep.Scheme)
		if ep.TLSConfig != nil {
			file := func(s secretKey) string {
				p := filepath.Join(dir, job+"-"+s.Key)
				if err := os.WriteFile(p, []byte(l.secretValue(s.Name, strings.ReplaceAll(s.Key, ".", `\.`))), 0o600); err != nil {
					t.Fatal(err)
				}
				return p
			}
			fmt.Fprintf(&cfg, "    tls_config:\n      ca_file: %s\n      cert_file: %s\n      key_file: %s\n      server_name: %s\n",
				file(ep.TLSConfig.CA.Secret), file(ep.TLSConfig.Cert.Secret), file(ep.TLSConfig.KeySecret), ep.TLSConfig.ServerName)
		}
		if s := ep.BearerTokenSecret; s != nil {
			p := filepath.Join(dir, job+"-token")
			if err := os.WriteFile(p, []byte(l.secretValue(s.Name, s.Key)), 0o600); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&cfg, "    authorization:\n      credentials_file: %s\n", p)
		}
		cfg.WriteString("    static_configs:\n      - targets:\n")
		for _, ip := range ips {
			fmt.Fprintf(&cfg, "          - %s\n", net.JoinHostPort(ip, port))
		}
		// prometheus-operator labels every target with its namespace.
		fmt.Fprintf(&cfg, "        labels:\n          namespace: %s\n", namespace)
		jobs = append(jobs, cfg.String())
		targets += len(ips)
	}
	conf := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(conf, []byte("global:\n  scrape_interval: 2s\nscrape_configs:\n"+strings.Join(jobs, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Logf("prometheus.yml:\n%s", strings.Join(jobs, ""))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(prom, "--config.file="+conf, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"), "--web.listen-address="+addr)
	logf, _ := os.Create(filepath.Join(dir, "prometheus.log"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	}()
	var last string
	l.eventually(90*time.Second, fmt.Sprintf("Prometheus to scrape all %d agents", targets), func() bool {
		resp, err := http.Get("http://" + addr + "/api/v1/targets")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var body struct {
			Data struct {
				ActiveTargets []struct {
					ScrapePool, ScrapeURL, Health, LastError string
				} `json:"activeTargets"`
			}
		}
		if json.NewDecoder(resp.Body).Decode(&body) != nil {
			return false
		}
		up := 0
		var states []string
		for _, tg := range body.Data.ActiveTargets {
			if tg.Health == "up" {
				up++
			}
			states = append(states, fmt.Sprintf("%s %s %s %s", tg.ScrapePool, tg.ScrapeURL, tg.Health, tg.LastError))
		}
		if s := strings.Join(states, "; "); s != last {
			t.Logf("targets: %s", s)
			last = s
		}
		return up == targets && len(body.Data.ActiveTargets) == targets
	})
	l.dashboardAnswers(t, "http://"+addr, targets)
}

// dashboardAnswers runs every query of the Grafana dashboard as Grafana
// sends it for this release (its namespace, and the job prefix its
// cluster variable makes of the servers' job) against the Prometheus at
// addr: each evaluates, and the leader, servers and client agents
// panels count this cluster's alone.
func (l *lab) dashboardAnswers(t *testing.T, addr string, targets int) {
	dashboard, err := grafanadash.Load(filepath.Join(l.repo, "deploy/grafana/plugreg-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	queries, err := dashboard.Queries(namespace, "plugreg-servers", "10s")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"Leader": 1, "Servers up": 3, "Client agents up": float64(targets - 3)}
	for _, q := range queries {
		var last string
		l.eventually(time.Minute, fmt.Sprintf("dashboard panel %q: %s", q.Panel, q.Expr), func() bool {
			resp, err := http.Get(addr + "/api/v1/query?query=" + url.QueryEscape(q.Expr))
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			var body struct {
				Status string
				Error  string
				Data   struct {
					Result []struct{ Value []any }
				}
			}
			if json.NewDecoder(resp.Body).Decode(&body) != nil || body.Status != "success" {
				if body.Error != last {
					t.Logf("%s: %s", q.Expr, body.Error)
					last = body.Error
				}
				return false
			}
			w, ok := want[q.Panel]
			if !ok {
				return true
			}
			return len(body.Data.Result) == 1 && len(body.Data.Result[0].Value) == 2 &&
				body.Data.Result[0].Value[1] == fmt.Sprint(w)
		})
	}
}
