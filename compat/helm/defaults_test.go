//go:build linux

package helm

import (
	"encoding/base64"
	"os"
	"reflect"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// The defaults the charts operators already trust have (consul-k8s,
// bitnami etcd, NVIDIA's device plugin): no two servers on one node, the
// pods' own service account with no token mounted, the runtime's seccomp
// profile, the servers at the restricted Pod Security level, the client
// agents scheduled before ordinary pods, a helm test.
func TestChartDefaults(t *testing.T) {
	m := render(t, valueSets["defaults"])
	srv, cli := m.servers.Spec.Template.Spec, m.clients.Spec.Template.Spec
	aff := srv.Affinity
	if aff == nil || aff.PodAntiAffinity == nil || len(aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Fatalf("servers' affinity %+v: want one required anti-affinity term", aff)
	}
	term := aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0]
	if term.TopologyKey != "kubernetes.io/hostname" || term.LabelSelector == nil ||
		term.LabelSelector.MatchLabels["app.kubernetes.io/component"] != "server" || term.LabelSelector.MatchLabels["app.kubernetes.io/instance"] != release {
		t.Errorf("anti-affinity term %+v: want this release's servers apart by kubernetes.io/hostname", term)
	}
	for what, pod := range map[string]corev1.PodSpec{"server": srv, "client": cli} {
		if pod.ServiceAccountName != release+"-plugreg" || pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
			t.Errorf("%s: service account %q, automount %v: want the chart's, no token", what, pod.ServiceAccountName, pod.AutomountServiceAccountToken)
		}
		if sc := pod.SecurityContext; sc == nil || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: no RuntimeDefault seccomp profile", what)
		}
		c := pod.Containers[0].SecurityContext
		if c == nil || c.AllowPrivilegeEscalation == nil || *c.AllowPrivilegeEscalation {
			t.Errorf("%s: privilege escalation allowed", what)
		}
	}
	// The restricted level for the servers: non-root, every capability dropped.
	if sc := srv.SecurityContext; sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Error("servers may run as root")
	}
	if c := srv.Containers[0].SecurityContext; c.Capabilities == nil || len(c.Capabilities.Drop) != 1 || c.Capabilities.Drop[0] != "ALL" {
		t.Error("servers keep capabilities")
	}
	if cli.PriorityClassName != "system-node-critical" {
		t.Errorf("client agents' priority class %q, want system-node-critical", cli.PriorityClassName)
	}
	for _, kind := range []string{"ServiceAccount", "Pod"} { // the Pod: helm test
		if !containsAll(m.kinds, []string{kind}) {
			t.Errorf("no %s in %v", kind, m.kinds)
		}
	}
	soft := render(t, map[string]any{"image": testImage, "server": map[string]any{"antiAffinity": "soft"}}).servers.Spec.Template.Spec.Affinity
	if soft == nil || len(soft.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 || len(soft.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 0 {
		t.Errorf("antiAffinity soft: %+v", soft)
	}
}

// Values that cannot work are refused at install, naming what to do:
// no image (none is published), an even or too large server count, a
// mistyped key, an unknown anti-affinity, ACLs with a ServiceMonitor but
// no token for it.
func TestChartRefusesImpossibleValues(t *testing.T) {
	cases := []struct {
		name string
		vals map[string]any
		want string
	}{
		{"no image", map[string]any{}, "image.repository is empty: no plugreg image is published"},
		{"two servers", map[string]any{"image": testImage, "server": map[string]any{"replicas": 2}}, "replicas"},
		{"four servers", map[string]any{"image": testImage, "server": map[string]any{"replicas": 4}}, "replicas"},
		{"mistyped key", map[string]any{"image": testImage, "sever": map[string]any{"replicas": 3}}, "sever"},
		{"unknown anti-affinity", map[string]any{"image": testImage, "server": map[string]any{"antiAffinity": "maybe"}}, "antiAffinity"},
		{"acl metrics without a token", map[string]any{"image": testImage, "acl": map[string]any{"enabled": true}, "serviceMonitor": map[string]any{"enabled": true}},
			"serviceMonitor.tokenSecret"},
		{"node name inside a path element", map[string]any{"image": testImage, "client": map[string]any{"dataDir": "/var/lib/plugreg-$(NODE_NAME)"}}, "whole path element"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := renderErr(tc.vals)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
}

// renderErr renders the chart as helm install would, values checked
// and returns the first refusal.
func renderErr(vals map[string]any) error {
	ch, err := loader.Load(chartDir)
	if err != nil {
		return err
	}
	// ToRenderValues checks the values against values.schema.json.
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: release, Namespace: namespace, IsInstall: true}, nil)
	if err != nil {
		return err
	}
	_, err = engine.Render(ch, rv)
	return err
}

// prometheusRule.enabled puts deploy/prometheus's alerts, unchanged, in
// a PrometheusRule: one file serves both.
func TestChartPrometheusRuleIsTheAlertsFile(t *testing.T) {
	m := render(t, map[string]any{"image": testImage, "prometheusRule": map[string]any{"enabled": true, "labels": map[string]any{"release": "kube-prometheus"}}})
	if len(m.docs["PrometheusRule"]) != 1 {
		t.Fatalf("kinds %v: want one PrometheusRule", m.kinds)
	}
	var rule struct {
		Metadata struct{ Labels map[string]string }
		Spec     struct{ Groups []any }
	}
	if err := yaml.Unmarshal([]byte(m.docs["PrometheusRule"][0]), &rule); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("../../deploy/prometheus/plugreg-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct{ Groups []any }
	if err := yaml.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Groups) == 0 || !reflect.DeepEqual(rule.Spec.Groups, file.Groups) {
		t.Errorf("the PrometheusRule's groups differ from deploy/prometheus/plugreg-alerts.yml's:\n%v\n%v", rule.Spec.Groups, file.Groups)
	}
	if rule.Metadata.Labels["release"] != "kube-prometheus" {
		t.Errorf("labels %v: want prometheusRule.labels", rule.Metadata.Labels)
	}
	if len(render(t, map[string]any{"image": testImage}).docs["PrometheusRule"]) != 0 {
		t.Error("a PrometheusRule by default")
	}
}

// gossip.autoGenerate without a Secret of one's own: the chart makes one
// with a key in plugreg keygen's form (32 random bytes, base64), kept on
// uninstall, and every agent reads it from its environment.
func TestChartGeneratesTheGossipKey(t *testing.T) {
	m := render(t, map[string]any{"image": testImage, "gossip": map[string]any{"autoGenerate": true}})
	var secret corev1.Secret
	for _, doc := range m.docs["Secret"] {
		if err := yaml.Unmarshal([]byte(doc), &secret); err != nil {
			t.Fatal(err)
		}
	}
	if secret.Name != release+"-plugreg-gossip" || secret.Annotations["helm.sh/resource-policy"] != "keep" {
		t.Fatalf("secret %s %v: want %s-plugreg-gossip, kept on uninstall", secret.Name, secret.Annotations, release)
	}
	key, err := base64.StdEncoding.DecodeString(string(secret.Data["key"]))
	if err != nil || len(key) != 32 {
		t.Fatalf("key %q: %d bytes, %v: want 32 bytes, base64", secret.Data["key"], len(key), err)
	}
	for what, pod := range map[string]corev1.PodSpec{"server": m.servers.Spec.Template.Spec, "client": m.clients.Spec.Template.Spec} {
		found := false
		for _, e := range pod.Containers[0].Env {
			if e.Name == "PLUGREG_GOSSIP_KEY" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == secret.Name {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: PLUGREG_GOSSIP_KEY does not come from %s", what, secret.Name)
		}
	}
	// A Secret of one's own wins, and nothing is generated.
	own := render(t, map[string]any{"image": testImage, "gossip": map[string]any{"autoGenerate": true, "encryptionSecret": "mine"}})
	if len(own.docs["Secret"]) != 0 {
		t.Errorf("a generated Secret beside gossip.encryptionSecret")
	}
}

// Volumes whose provisioner ignores fsGroup (hostPath, local-path: met
// on a real cluster, the servers could not write /data) get an init
// container that gives the data volume to the servers' user, as root
// with CHOWN alone; off by default.
func TestChartVolumePermissions(t *testing.T) {
	if n := len(render(t, valueSets["defaults"]).servers.Spec.Template.Spec.InitContainers); n != 0 {
		t.Fatalf("%d init containers by default, want none", n)
	}
	srv := render(t, map[string]any{"image": testImage, "server": map[string]any{"volumePermissions": map[string]any{"enabled": true, "image": "busybox:1.36"}}}).servers.Spec.Template.Spec
	if len(srv.InitContainers) != 1 {
		t.Fatalf("init containers %+v: want one", srv.InitContainers)
	}
	c := srv.InitContainers[0]
	want := []string{"chown", "65532:65532", "/data"} // not -R: the server's own 0700 dirs are closed to root without DAC_READ_SEARCH
	if !reflect.DeepEqual(c.Command, want) || c.Image != "busybox:1.36" {
		t.Errorf("init container runs %q %v, want busybox:1.36 %v", c.Image, c.Command, want)
	}
	if sc := c.SecurityContext; sc == nil || sc.Capabilities == nil || !reflect.DeepEqual(sc.Capabilities.Add, []corev1.Capability{"CHOWN"}) ||
		!reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("init container security %+v: want CHOWN alone, no escalation", c.SecurityContext)
	}
	if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].Name != "data" || c.VolumeMounts[0].MountPath != "/data" {
		t.Errorf("init container mounts %+v: want the data volume at /data", c.VolumeMounts)
	}
}

// Several kubelets on one host (kind, the compat lab) share its paths:
// a client agent's dirs with /$(NODE_NAME) in them mount the dir above
// and name the whole path in the agent's flags (kubelet expands it), so
// each node's agent has its own data dir and plugin socket. Without
// it, the second agent on the host was refused the first's data dir.
func TestChartHostDirsPerNode(t *testing.T) {
	cases := []struct {
		name               string
		client             map[string]any
		dataArg, dataMount string
		hostData, sockArg  string
		hostSock           string
	}{
		{"defaults", map[string]any{}, "/data", "/data", "/var/lib/plugreg", "/var/run/plugreg/plugin.sock", "/var/run/plugreg"},
		{"per node", map[string]any{"dataDir": "/var/lib/plugreg/$(NODE_NAME)", "pluginSocketDir": "/var/run/plugreg/$(NODE_NAME)"},
			"/var/lib/plugreg/$(NODE_NAME)", "/var/lib/plugreg", "/var/lib/plugreg", "/var/run/plugreg/$(NODE_NAME)/plugin.sock", "/var/run/plugreg"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cli := render(t, map[string]any{"image": testImage, "client": tc.client}).clients.Spec.Template.Spec
			args := strings.Join(cli.Containers[0].Args, " ")
			for _, want := range []string{"-data-dir " + tc.dataArg + " ", "-plugin-socket " + tc.sockArg + " "} {
				if !strings.Contains(args, want) {
					t.Errorf("args %q: want %q", args, want)
				}
			}
			mounts := map[string]string{}
			for _, m := range cli.Containers[0].VolumeMounts {
				mounts[m.Name] = m.MountPath
			}
			hosts := map[string]string{}
			for _, v := range cli.Volumes {
				if v.HostPath != nil {
					hosts[v.Name] = v.HostPath.Path
				}
			}
			if mounts["data"] != tc.dataMount || hosts["data"] != tc.hostData {
				t.Errorf("data: host %q mounted at %q, want %q at %q", hosts["data"], mounts["data"], tc.hostData, tc.dataMount)
			}
			if hosts["plugin-socket"] != tc.hostSock || mounts["plugin-socket"] != tc.hostSock {
				t.Errorf("plugin socket: host %q mounted at %q, want %q at the same path", hosts["plugin-socket"], mounts["plugin-socket"], tc.hostSock)
			}
		})
	}
}

// acl.enabled turns ACLs on on every agent, client agents too, in
// default deny unless acl.defaultPolicy says allow: on a real cluster the
// client agents ran without ACLs (checking no caller's token, serving
// reads to anyone who reached them) and the servers in default allow.
func TestChartACLsOnEveryAgent(t *testing.T) {
	for _, policy := range []string{"", "allow"} {
		acl := map[string]any{"enabled": true, "bootstrapToken": map[string]any{"autoGenerate": true}}
		want := "deny"
		if policy != "" {
			acl["defaultPolicy"], want = policy, policy
		}
		m := render(t, map[string]any{"image": testImage, "acl": acl})
		for what, pod := range map[string]corev1.PodSpec{"server": m.servers.Spec.Template.Spec, "client": m.clients.Spec.Template.Spec} {
			args := strings.Join(pod.Containers[0].Args, " ")
			if !strings.Contains(args, "-acl-enabled -acl-default-policy "+want+" ") && !strings.HasSuffix(args, "-acl-enabled -acl-default-policy "+want) {
				t.Errorf("%s (defaultPolicy %q): args %q, want -acl-enabled -acl-default-policy %s", what, policy, args, want)
			}
		}
	}
}
