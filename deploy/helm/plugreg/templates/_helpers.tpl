{{/* Names and labels shared by every template. */}}
{{- define "plugreg.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "plugreg.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "plugreg.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "plugreg.image" -}}
{{ required "image.repository is empty: no plugreg image is published. Build one (docs/kubernetes.md, The image: docker build ., or go run ./deploy/image without a daemon), push it to a registry your nodes pull from, and set image.repository and image.tag" .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* What every pod of the chart shares: its service account, whose
token is never mounted (no pod of the chart calls the Kubernetes API),
and the registry credentials. */}}
{{- define "plugreg.podCommon" -}}
serviceAccountName: {{ include "plugreg.fullname" . }}
automountServiceAccountToken: false
{{- with .Values.image.pullSecrets }}
imagePullSecrets:
  {{- range . }}
  - name: {{ . }}
  {{- end }}
{{- end }}
{{- end -}}

{{/* The servers' affinity: the values' own, else server.antiAffinity. */}}
{{- define "plugreg.serverAffinity" -}}
{{- if .Values.server.affinity -}}
{{- toYaml .Values.server.affinity -}}
{{- else if eq .Values.server.antiAffinity "hard" -}}
podAntiAffinity:
  requiredDuringSchedulingIgnoredDuringExecution:
    - topologyKey: kubernetes.io/hostname
      labelSelector:
        matchLabels:
          {{- include "plugreg.selector" (dict "root" . "component" "server") | nindent 10 }}
{{- else if eq .Values.server.antiAffinity "soft" -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "plugreg.selector" (dict "root" . "component" "server") | nindent 12 }}
{{- end -}}
{{- end -}}

{{/* The gossip address of every server, through the headless service. */}}
{{- define "plugreg.joinArgs" -}}
{{- $root := . -}}
{{- range $i := until (int .Values.server.replicas) }}
- -join
- {{ printf "%s-server-%d.%s-server.%s.svc:%d" (include "plugreg.fullname" $root) $i (include "plugreg.fullname" $root) $root.Release.Namespace (int $root.Values.ports.gossip) }}
{{- end }}
- -retry-join
{{- end -}}

{{/* Flags every agent takes: ports, TLS, gossip key, cluster name. */}}
{{- define "plugreg.commonArgs" -}}
- -bind
- $(POD_IP)
- -http-port
- {{ .root.Values.ports.http | quote }}
- -probe-port
- {{ .root.Values.ports.probe | quote }}
- -gossip-port
- {{ .root.Values.ports.gossip | quote }}
- -cluster-name
- {{ .root.Values.clusterName }}
{{- if .root.Values.tls.enabled }}
- -tls-ca-file
- /etc/plugreg/tls/ca.crt
- -tls-cert-file
- /etc/plugreg/tls/tls.crt
- -tls-key-file
- /etc/plugreg/tls/tls.key
- -verify-incoming
- -verify-outgoing
{{- if .root.Values.tls.verifyServerHostname }}
- -verify-server-hostname
{{- end }}
{{- end }}
{{- if .root.Values.acl.enabled }}
{{- /* Every agent, client agents too: a client agent without ACLs
checks no caller's token and serves its reads (fetched as Anyone over
the agent RPC) to whoever reaches it. */}}
- -acl-enabled
- -acl-default-policy
- {{ .root.Values.acl.defaultPolicy }}
{{- end }}
{{- if .root.Values.tracing.endpoint }}
- -trace-endpoint
- {{ .root.Values.tracing.endpoint | quote }}
- -trace-sample-rate
- {{ .root.Values.tracing.sampleRate | quote }}
{{- end }}
{{- end -}}

{{/* -http-allowed-hosts of the servers: the names clients reach their API
by over plain HTTP (a DNS-rebinding page's Host is refused). The API
service's and the headless service's, each pod's through it, short and
qualified, and http.allowedHosts. */}}
{{- define "plugreg.serverAllowedHosts" -}}
{{- $name := include "plugreg.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- $hosts := list -}}
{{- range $svc := list $name (printf "%s-server" $name) (printf "*.%s-server" $name) -}}
{{- $hosts = append $hosts $svc -}}
{{- $hosts = append $hosts (printf "%s.%s" $svc $ns) -}}
{{- $hosts = append $hosts (printf "%s.%s.svc" $svc $ns) -}}
{{- $hosts = append $hosts (printf "%s.%s.svc.%s" $svc $ns $.Values.clusterDomain) -}}
{{- end -}}
{{- join "," (concat $hosts .Values.http.allowedHosts) -}}
{{- end -}}

{{/* The environment the args above expand. */}}
{{- define "plugreg.commonEnv" -}}
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
# The CLI's default address and TLS (kubectl exec ... plugreg members):
# its own agent, verified by the CA, with the pod's certificate (a
# server's names server.<clusterName>.plugreg, a client agent's
# client.<clusterName>.plugreg).
- name: PLUGREG_ADDR
  value: {{ printf "%s://$(POD_IP):%d" (ternary "https" "http" .root.Values.tls.enabled) (int .root.Values.ports.http) | quote }}
{{- if .root.Values.tls.enabled }}
{{- include "plugreg.tlsEnv" (dict "root" .root "role" .role) }}
{{- end }}
{{- with (include "plugreg.gossipSecret" .root) }}
# Read by the agent as -encrypt (an argument would be visible to every
# user of the node).
- name: PLUGREG_GOSSIP_KEY
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: key
{{- end }}
{{- end -}}

{{- define "plugreg.scheme" -}}
{{ if .Values.tls.enabled }}HTTPS{{ else }}HTTP{{ end }}
{{- end -}}

{{/* How Prometheus scrapes an agent: over HTTPS with TLS on (the CA
verifies the agent's certificate, named for its role; the client agents'
certificate is presented, for -verify-incoming), and with ACLs on with a
token from serviceMonitor.tokenSecret (any policy reads metrics). */}}
{{- define "plugreg.scrapeAuth" -}}
{{- $v := .root.Values -}}
{{- if $v.tls.enabled }}
scheme: https
tlsConfig:
  serverName: {{ printf "%s.%s.plugreg" .role $v.clusterName }}
  ca:
    secret:
      name: {{ $v.tls.clientSecretName }}
      key: ca.crt
  cert:
    secret:
      name: {{ $v.tls.clientSecretName }}
      key: tls.crt
  keySecret:
    name: {{ $v.tls.clientSecretName }}
    key: tls.key
{{- end }}
{{- if $v.acl.enabled }}
bearerTokenSecret:
  name: {{ required "serviceMonitor.tokenSecret: with acl.enabled, Prometheus needs a token (a Secret with it under \"token\") to read /v1/metrics" ($v.serviceMonitor.tokenSecret | default (include "plugreg.bootstrapSecret" .root)) }}
  key: token
{{- end }}
{{- end -}}

{{/* The Secret holding the operator token ACLs are bootstrapped with,
if any: acl.bootstrapToken's own, or the chart's generated one. */}}
{{- define "plugreg.bootstrapSecret" -}}
{{- if .Values.acl.enabled -}}
{{- if .Values.acl.bootstrapToken.secretName -}}
{{- .Values.acl.bootstrapToken.secretName -}}
{{- else if .Values.acl.bootstrapToken.autoGenerate -}}
{{- printf "%s-bootstrap-token" (include "plugreg.fullname" .) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding the gossip key: gossip.encryptionSecret, else the
chart's own with gossip.autoGenerate, else none (gossip in the clear). */}}
{{- define "plugreg.gossipSecret" -}}
{{- if .Values.gossip.encryptionSecret -}}
{{- .Values.gossip.encryptionSecret -}}
{{- else if .Values.gossip.autoGenerate -}}
{{- printf "%s-gossip" (include "plugreg.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* The CLI's environment in a pod of its own (helm test, the snapshot
CronJob): the API service, and with TLS on the client agents'
certificate (mounted by plugreg.cliMounts) verified as a server's; with
a token Secret (.tokenSecret), its token as a file. */}}
{{- define "plugreg.cliEnv" -}}
{{- $v := .root.Values -}}
- name: PLUGREG_ADDR
  value: {{ printf "%s://%s.%s.svc:%d" (ternary "https" "http" $v.tls.enabled) (include "plugreg.fullname" .root) .root.Release.Namespace (int $v.ports.http) | quote }}
{{- if $v.tls.enabled }}
{{- include "plugreg.tlsEnv" (dict "root" .root "role" "server") }}
{{- end }}
{{- if .tokenSecret }}
- name: PLUGREG_TOKEN_FILE
  value: /etc/plugreg/token/token
{{- end }}
{{- end -}}

{{/* The mounts plugreg.cliEnv names, and their volumes. */}}
{{- define "plugreg.cliMounts" -}}
{{- if .root.Values.tls.enabled }}
- name: tls
  mountPath: /etc/plugreg/tls
  readOnly: true
{{- end }}
{{- if .tokenSecret }}
- name: token
  mountPath: /etc/plugreg/token
  readOnly: true
{{- end }}
{{- end -}}

{{- define "plugreg.cliVolumes" -}}
{{- if .root.Values.tls.enabled }}
- name: tls
  secret:
    secretName: {{ .root.Values.tls.clientSecretName }}
{{- end }}
{{- if .tokenSecret }}
- name: token
  secret:
    secretName: {{ .tokenSecret }}
{{- end }}
{{- end -}}

{{/* A CLI pod's security: the restricted level, as the servers'. */}}
{{- define "plugreg.cliSecurity" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "plugreg.containerSecurity" -}}
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* The CLI's TLS, from the Secret mounted at /etc/plugreg/tls: the CA,
the pod's certificate, and the name the agent it calls must carry
(.role: server or client). */}}
{{- define "plugreg.tlsEnv" }}
- name: PLUGREG_CACERT
  value: /etc/plugreg/tls/ca.crt
- name: PLUGREG_CLIENT_CERT
  value: /etc/plugreg/tls/tls.crt
- name: PLUGREG_CLIENT_KEY
  value: /etc/plugreg/tls/tls.key
- name: PLUGREG_TLS_SERVER_NAME
  value: {{ printf "%s.%s.plugreg" .role .root.Values.clusterName | quote }}
{{- end -}}

{{/*
The host dir to mount for a client agent's host path: the path itself,
or, when it holds /$(NODE_NAME) (several kubelets on one host: kind, the
compat lab), the dir above it. The agent's flags name the whole path;
kubelet expands $(NODE_NAME) in them.
*/}}
{{- define "plugreg.hostDir" -}}
{{- if contains "$(NODE_NAME)" . -}}
{{- if not (contains "/$(NODE_NAME)" .) -}}
{{- fail (printf "%q: $(NODE_NAME) must be a whole path element (/$(NODE_NAME))" .) -}}
{{- end -}}
{{- first (splitList "/$(NODE_NAME)" .) -}}
{{- else -}}
{{- . -}}
{{- end -}}
{{- end -}}

{{/*
A client agent's data dir in its container (/data, or, per node, the
host's path under the host dir mounted at the same path) and the mount
that holds it.
*/}}
{{- define "plugreg.clientDataDir" -}}
{{- if contains "$(NODE_NAME)" .Values.client.dataDir -}}
{{- .Values.client.dataDir -}}
{{- else -}}
/data
{{- end -}}
{{- end -}}

{{- define "plugreg.clientDataMount" -}}
{{- if contains "$(NODE_NAME)" .Values.client.dataDir -}}
{{- include "plugreg.hostDir" .Values.client.dataDir -}}
{{- else -}}
/data
{{- end -}}
{{- end -}}
