#!/usr/bin/env bash
# lab.sh: a real Kubernetes v1.34.4 on this one machine, for plugreg's
# Kubernetes compatibility tests (chart install, required anti-affinity of
# the servers, the client DaemonSet on every node). No registry, no
# internet: everything is built from the Go module proxy and Debian
# packages. See README.md next to this file.
#
#   lab.sh install            Debian packages (containerd, runc, CNI plugins, etcd, busybox)
#   lab.sh build              binaries and images into $LAB_HOME (skips what is current)
#   lab.sh up                 down, then etcd, control plane, NODES x (containerd+kubelet),
#                             kube-proxy, CoreDNS, StorageClass "lab" and LAB_PVS volumes
#   lab.sh down               stop everything, undo every host change (safe when nothing is up)
#   lab.sh status             what runs; exit 1 unless every component is alive
#   lab.sh load-image TAR...  import docker-archive tarballs into every node
#   lab.sh pvs N [SIZE]       N more hostPath PersistentVolumes of class "lab"
#   lab.sh kubelet stop|start N  stop node N's kubelet alone (its pods run on), or start it
#   lab.sh node stop|start N     power node N off (its kubelet stopped, every container killed), or on
#   lab.sh env                exports for eval: KUBECONFIG, PATH (kubectl, helm, crictl)
#
# Settings (environment): LAB_HOME (PLUGREG_K8S_LAB, else /var/tmp/plugreg-k8s), NODES (3),
# LAB_PVS (6) and LAB_PV_SIZE (10Gi) for up, LAB_CLEAN_DIRS (host dirs that
# down removes, such as a chart's hostPath dirs), LAB_NODE_DIRS (host dirs
# each node sees privately, see README.md), GOCACHE for build.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# PLUGREG_K8S_LAB is how compat/kubernetes's Go test names the lab's home,
# so a test that runs lab.sh (load-image) acts on the lab it was given.
LAB_HOME=${LAB_HOME:-${PLUGREG_K8S_LAB:-/var/tmp/plugreg-k8s}}
NODES=${NODES:-3}
LAB_PVS=${LAB_PVS:-6}
LAB_PV_SIZE=${LAB_PV_SIZE:-10Gi}
LAB_CLEAN_DIRS=${LAB_CLEAN_DIRS:-}
LAB_NODE_DIRS=${LAB_NODE_DIRS:-}

BIN=$LAB_HOME/bin IMG=$LAB_HOME/images PKI=$LAB_HOME/pki ETC=$LAB_HOME/etc
STATE=$LAB_HOME/state RUN=$LAB_HOME/run LOG=$LAB_HOME/log PV=$LAB_HOME/pv
# kubectl and helm cache and keep config under $HOME by default: in the lab
# they keep them here, and down removes them (a discovery cache outlives the
# cluster it describes).
CACHE=$LAB_HOME/cache

# Versions that work together here. Kubernetes 1.35 refuses cgroup v1 by
# default and this machine has only v1, so 1.34 it is; the staging modules
# (k8s.io/api, ...) are v0.34.4, pinned by src/k8sbuild/go.mod.
K8S_VERSION=v1.34.4
CRICTL_VERSION=v1.34.0
HELM_VERSION=v3.19.5 # the Helm release built on client-go 0.34

# Addresses. Nothing here may leave the machine: the node IPs sit on an
# empty bridge, and the guard chain drops the lab's ranges on the uplink.
NODE_NET=172.29.0
APISERVER_IP=$NODE_NET.1 APISERVER_PORT=6443
ETCD_PORT=12379 ETCD_PEER_PORT=12380 # off etcd's defaults: a system etcd may hold 2379
CLUSTER_CIDR=10.244.0.0/16 SERVICE_CIDR=10.96.0.0/16 DNS_IP=10.96.0.10
PAUSE_IMAGE=localhost/pause:local
HOSTLINK=k8slab0 # the empty bridge holding the node IPs
GUARD=K8SLAB-GUARD

CONTAINERD=/usr/bin/containerd RUNC=/usr/sbin/runc CNI_BIN=/usr/lib/cni ETCD=/usr/bin/etcd

# Sysctls the lab changes: the first three are set by up, the rest by the
# kubelet (it forces vm.overcommit_memory=1, kernel.panic=10,
# kernel.panic_on_oops=1, ...) and kube-proxy. up saves them, down restores.
SYSCTLS="net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables fs.inotify.max_user_instances
  vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys
  kernel.keys.root_maxbytes net.ipv4.conf.all.route_localnet net.netfilter.nf_conntrack_max"

node_ip() { echo "$NODE_NET.$1"; }
node_name() { echo "lab-node$1"; }
node_sock() { echo "$RUN/node$1/containerd.sock"; }
pod_cidr() { echo "10.244.$(($1 - 1)).0/24"; }
pod_bridge() { echo "k8slab-p$1"; }
# Every kubelet binds its node IP, but healthz is on 127.0.0.1: ports differ per node.
kubelet_port() { echo $((10250 + ($1 - 1) * 1000)); }

T0=$(date +%s.%N)
say() { awk -v a="$T0" -v b="$(date +%s.%N)" -v m="$*" 'BEGIN { printf "[lab %6.1fs] %s\n", b - a, m }' >&2; }
die() { say "ERROR: $*"; exit 1; }
kubectl() { "$BIN/kubectl" --kubeconfig "$ETC/admin.kubeconfig" --cache-dir "$CACHE/kube" "$@"; }
ctrn() { local n=$1; shift; ctr --address "$(node_sock "$n")" -n k8s.io "$@"; }

# Nodes whose containerd this lab started, from the pid files: load-image,
# status and down act on what runs, whatever NODES says now.
running_nodes() {
	local f
	for f in "$RUN"/containerd-*.pid; do
		[ -e "$f" ] || continue
		f=${f##*/containerd-}
		echo "${f%.pid}"
	done | sort -n
}

alive() { [ -f "$RUN/$1.pid" ] && kill -0 "$(cat "$RUN/$1.pid")" 2>/dev/null; }

# start NAME CMD...: in the background, pid in run/NAME.pid, output in log/NAME.log.
start() {
	local name=$1
	shift
	nohup "$@" >"$LOG/$name.log" 2>&1 &
	echo $! >"$RUN/$name.pid"
}

# waitfor SECONDS WHAT CMD...: polls CMD; on time-out names the log to read.
waitfor() {
	local t=$1 what=$2 end
	shift 2
	end=$(($(date +%s) + t))
	until "$@" >/dev/null 2>&1; do
		[ "$(date +%s)" -lt "$end" ] || die "$what: not ready after ${t}s (logs in $LOG; run lab.sh down)"
		sleep 0.5
	done
	say "$what: ok"
}

# ---------------------------------------------------------------- install

cmd_install() {
	local pkgs="containerd runc containernetworking-plugins etcd-server busybox-static iptables iproute2 openssl curl util-linux"
	# shellcheck disable=SC2086
	if ! dpkg-query -W $pkgs >/dev/null 2>&1; then
		export DEBIAN_FRONTEND=noninteractive
		apt-get install -y -q $pkgs >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q $pkgs >/dev/null; }
	fi
	# shellcheck disable=SC2086
	dpkg-query -W containerd runc containernetworking-plugins etcd-server busybox-static
	# The lab starts its own containerd per node; one started by the package
	# (there is no systemd here, so normally none) would not be disturbed.
	if pgrep -x containerd >/dev/null; then say "note: a containerd not started by lab.sh runs: $(pgrep -x containerd | tr '\n' ' ')"; fi
}

# ------------------------------------------------------------------ build

# Version variables: without them the server reports v0.0.0-master and a
# chart with a kubeVersion constraint refuses to install.
k8s_ldflags() {
	local p minor
	minor=$(echo "$K8S_VERSION" | cut -d. -f2)
	printf '%s' "-s -w"
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		printf ' %s' "-X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
	done
}

# current NAME KEY: whether bin/NAME exists and was built from KEY. The key
# holds the version and a hash of the sources, so a changed go.mod or a new
# version rebuilds and nothing else does.
current() { [ -x "$BIN/$1" ] && [ "$(cat "$BIN/.$1.key" 2>/dev/null)" = "$2" ]; }
built() { echo "$2" >"$BIN/.$1.key"; }
srckey() { (cd "$HERE/src/$1" && find . -maxdepth 1 -type f \( -name "go.*" -o -name "*.go" \) | sort | xargs cat | sha256sum | cut -c1-16); }

step() {
	local name=$1 s
	shift
	s=$(date +%s)
	"$@"
	say "built $name in $(($(date +%s) - s))s"
}

cmd_build() {
	command -v go >/dev/null || PATH=/usr/local/go/bin:$PATH
	command -v go >/dev/null || die "go not found"
	mkdir -p "$BIN" "$IMG" "$LOG"
	# Static binaries (they run inside images with nothing else in them) and
	# no VCS stamping (the sources are module zips, not this checkout).
	export CGO_ENABLED=0 GOFLAGS=-buildvcs=false
	local ldf c key
	ldf=$(k8s_ldflags)
	key="$K8S_VERSION $(srckey k8sbuild)"
	for c in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
		current "$c" "$key" && continue
		(cd "$HERE/src/k8sbuild" && step "$c" go build -ldflags "$ldf" -o "$BIN/$c" "k8s.io/kubernetes/cmd/$c")
		built "$c" "$key"
	done
	"$BIN/kube-apiserver" --version | grep -qx "Kubernetes $K8S_VERSION" || die "kube-apiserver does not report $K8S_VERSION"

	if ! current crictl "$CRICTL_VERSION"; then
		step crictl env GOBIN="$BIN" go install -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION" "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"
		built crictl "$CRICTL_VERSION"
	fi
	if ! current helm "$HELM_VERSION"; then
		step helm env GOBIN="$BIN" go install -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
		built helm "$HELM_VERSION"
	fi
	for c in coredns mkimage pause; do
		key=$(srckey "$c")
		current "$c" "$key" && continue
		(cd "$HERE/src/$c" && step "$c" go build -ldflags "-s -w" -o "$BIN/$c" .)
		built "$c" "$key"
	done

	# Images: rebuilt when missing or older than what they pack.
	if [ ! -s "$IMG/pause.tar" ] || [ "$BIN/pause" -nt "$IMG/pause.tar" ]; then
		"$BIN/mkimage" -o "$IMG/pause.tar" -tag "$PAUSE_IMAGE" -entrypoint /pause -file "$BIN/pause:/pause:0755" >/dev/null
	fi
	if [ ! -s "$IMG/coredns.tar" ] || [ "$BIN/coredns" -nt "$IMG/coredns.tar" ]; then
		"$BIN/mkimage" -o "$IMG/coredns.tar" -tag localhost/coredns:local -entrypoint /coredns -file "$BIN/coredns:/coredns:0755" >/dev/null
	fi
	# busybox: Debian's static binary and its applet links; the image tests
	# and charts' helper containers can use (localhost/busybox:local).
	if [ ! -s "$IMG/busybox.tar" ] || [ /bin/busybox -nt "$IMG/busybox.tar" ]; then
		local links=() a
		for a in $(/bin/busybox --list-full | grep -vx bin/busybox); do links+=(-symlink "/bin/busybox:/$a"); done
		"$BIN/mkimage" -o "$IMG/busybox.tar" -tag localhost/busybox:local -cmd sh -dir /tmp -dir /etc -dir /root \
			-file /bin/busybox:/bin/busybox:0755 "${links[@]}" >/dev/null
	fi
	say "build done: $(cd "$BIN" && echo *) | images: $(cd "$IMG" && echo *.tar)"
}

# -------------------------------------------------------------------- pki

# cert NAME CN ORG [SAN]: a key and a certificate signed by the lab CA;
# with a SAN it is a serving certificate too.
cert() {
	local name=$1 cn=$2 o=$3 san=${4:-} subj
	[ -f "$PKI/$name.crt" ] && return 0
	subj="/CN=$cn"
	[ -n "$o" ] && subj="/O=$o$subj"
	openssl genrsa -out "$PKI/$name.key" 2048 2>/dev/null
	openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr"
	{
		echo "basicConstraints=CA:FALSE"
		echo "keyUsage=critical,digitalSignature,keyEncipherment"
		if [ -n "$san" ]; then
			echo "extendedKeyUsage=serverAuth,clientAuth"
			echo "subjectAltName=$san"
		else
			echo "extendedKeyUsage=clientAuth"
		fi
	} >"$PKI/$name.ext"
	openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/${CA:-ca}.crt" -CAkey "$PKI/${CA:-ca}.key" -CAcreateserial \
		-days 3650 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null
	rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}

ca() {
	[ -f "$PKI/$1.key" ] && return 0
	openssl genrsa -out "$PKI/$1.key" 2048 2>/dev/null
	openssl req -x509 -new -key "$PKI/$1.key" -subj "/CN=$2" -days 3650 -out "$PKI/$1.crt"
}

# kubeconfig FILE CERT: a kubeconfig with everything embedded, so it can be
# copied into a pod or handed to a Go test as is.
kubeconfig() {
	local f=$ETC/$1.kubeconfig k="$BIN/kubectl"
	[ -f "$f" ] && return 0
	"$k" config --kubeconfig="$f" set-cluster lab --server="https://$APISERVER_IP:$APISERVER_PORT" --certificate-authority="$PKI/ca.crt" --embed-certs >/dev/null
	"$k" config --kubeconfig="$f" set-credentials "$2" --client-certificate="$PKI/$2.crt" --client-key="$PKI/$2.key" --embed-certs >/dev/null
	"$k" config --kubeconfig="$f" set-context lab --cluster=lab --user="$2" >/dev/null
	"$k" config --kubeconfig="$f" use-context lab >/dev/null
}

# Certificates and kubeconfigs outlive down: they depend on nothing that
# changes between runs, and making them takes seconds.
pki() {
	local n
	mkdir -p "$PKI" "$ETC"
	ca ca plugreg-lab-ca
	cert apiserver kube-apiserver "" "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:10.96.0.1,IP:$APISERVER_IP"
	cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
	cert admin lab-admin system:masters
	cert controller-manager system:kube-controller-manager ""
	cert scheduler system:kube-scheduler ""
	cert kube-proxy system:kube-proxy ""
	# The aggregation layer's own CA, so charts with an APIService work.
	ca front-proxy-ca front-proxy-ca
	CA=front-proxy-ca cert front-proxy-client front-proxy-client ""
	[ -f "$PKI/sa.key" ] || { openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null && openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null; }
	for c in admin controller-manager scheduler kube-proxy; do kubeconfig "$c" "$c"; done
	for n in $(seq "$NODES"); do
		# NodeRestriction admits a kubelet only as system:node:<its node name>.
		cert "kubelet-$n" "system:node:$(node_name "$n")" system:nodes
		kubeconfig "kubelet-$n" "kubelet-$n"
	done
}

# ---------------------------------------------------------------- host

# Records what the host looked like before up, once, so that down undoes
# exactly the lab's changes and nothing that was there before.
save_host() {
	local s d
	if [ ! -f "$RUN/sysctl.saved" ]; then
		for s in $SYSCTLS; do
			if [ -e "/proc/sys/${s//.//}" ]; then echo "$s=$(sysctl -n "$s")"; fi
		done >"$RUN/sysctl.saved.tmp"
		mv "$RUN/sysctl.saved.tmp" "$RUN/sysctl.saved"
	fi
	if [ ! -f "$RUN/dirs.absent" ]; then
		# Dirs the kubelet, containerd and CNI create outside LAB_HOME, and
		# the LAB_NODE_DIRS mount points: down removes those that were absent.
		for d in /var/lib/kubelet /var/run/netns /var/log/containers /var/log/pods /var/lib/cni/results /var/lib/cni /run/containerd/s /run/containerd $LAB_NODE_DIRS; do
			[ -e "$d" ] || echo "$d"
		done >"$RUN/dirs.absent"
	fi
	[ -f "$RUN/netns.before" ] || { ls /var/run/netns 2>/dev/null || true; } >"$RUN/netns.before"
}

host_network() {
	local n ext
	sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1 fs.inotify.max_user_instances=1024
	# No dummy driver in this kernel: an empty bridge holds the node IPs.
	ip link show "$HOSTLINK" >/dev/null 2>&1 || ip link add "$HOSTLINK" type bridge
	ip link set "$HOSTLINK" up
	for n in $(seq "$NODES"); do ip addr replace "$(node_ip "$n")/32" dev "$HOSTLINK"; done
	# The guard: nothing of the lab's ranges leaves or enters through the
	# uplink, in either direction, whatever kube-proxy or CNI do. One chain,
	# hooked from mangle, so down removes it with the KUBE-/CNI- sweep.
	ext=$(ip route show default | awk '{ print $5; exit }')
	if ! iptables -t mangle -S "$GUARD" >/dev/null 2>&1; then
		iptables -t mangle -N "$GUARD"
		for r in "$CLUSTER_CIDR" "$SERVICE_CIDR" "$NODE_NET.0/24"; do
			iptables -t mangle -A "$GUARD" -s "$r" -j DROP
			iptables -t mangle -A "$GUARD" -d "$r" -j DROP
		done
		if [ -n "$ext" ]; then
			iptables -t mangle -I POSTROUTING -o "$ext" -j "$GUARD"
			iptables -t mangle -I PREROUTING -i "$ext" -j "$GUARD"
		fi
	fi
}

# Each node's pods live under their own cgroup root, /kl-nodeN, in every
# v1 hierarchy: two kubelets sharing one would each reap the other's pods.
node_cgroups() {
	local n=$1 c
	for c in /sys/fs/cgroup/*/; do
		case $c in */unified/) continue ;; esac
		[ -L "${c%/}" ] && continue # cpu -> cpu,cpuacct
		mkdir -p "$c/kl-node$n"
	done
	cat /sys/fs/cgroup/cpuset/cpuset.cpus >"/sys/fs/cgroup/cpuset/kl-node$n/cpuset.cpus"
	cat /sys/fs/cgroup/cpuset/cpuset.mems >"/sys/fs/cgroup/cpuset/kl-node$n/cpuset.mems"
}

# ------------------------------------------------------------------- up

cmd_up() {
	local n
	for c in kube-apiserver kubelet coredns crictl kubectl pause mkimage; do [ -x "$BIN/$c" ] || die "$BIN/$c missing: run lab.sh build"; done
	for c in "$CONTAINERD" "$RUNC" "$ETCD" "$CNI_BIN/bridge" /bin/busybox; do [ -x "$c" ] || die "$c missing: run lab.sh install"; done
	[ "$(stat -fc %T /sys/fs/cgroup)" = tmpfs ] || die "cgroup v2 host: this lab is written for cgroup v1"
	[ "$NODES" -ge 1 ] && [ "$NODES" -le 9 ] || die "NODES=$NODES: 1 to 9"
	cmd_down
	# Only one Kubernetes at a time: another's kubelet would fight over
	# ports, iptables chains and sysctls. (A system etcd may run: ours is
	# on other ports.)
	local other
	other=$(for c in kubelet kube-apiserver kube-proxy; do pgrep -a -x "$c" || true; done | cut -c1-100 | tr '\n' ';')
	[ -z "$other" ] || die "a Kubernetes not started from $LAB_HOME runs: $other"
	mkdir -p "$RUN"
	echo "$LAB_NODE_DIRS" >"$RUN/node-dirs" # for lab.sh kubelet start
	T0=$(date +%s.%N)
	mkdir -p "$STATE" "$RUN" "$LOG" "$PV"
	pki
	save_host
	host_network
	say "host network ready"

	# etcd 3.4 (Debian's) on a tmpfs: fsync-heavy, and its data is thrown
	# away by down anyway.
	mkdir -p "$STATE/etcd"
	mountpoint -q "$STATE/etcd" || mount -t tmpfs -o size=2g,mode=0700 tmpfs "$STATE/etcd"
	start etcd "$ETCD" --name lab --data-dir "$STATE/etcd/data" \
		--listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
		--listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-cluster "lab=http://127.0.0.1:$ETCD_PEER_PORT" --quota-backend-bytes=1073741824
	waitfor 30 etcd curl -sf "http://127.0.0.1:$ETCD_PORT/health"

	start kube-apiserver "$BIN/kube-apiserver" --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
		--bind-address="$APISERVER_IP" --advertise-address="$APISERVER_IP" --secure-port="$APISERVER_PORT" \
		--service-cluster-ip-range="$SERVICE_CIDR" \
		--client-ca-file="$PKI/ca.crt" --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
		--kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
		--kubelet-preferred-address-types=InternalIP,Hostname \
		--service-account-issuer=https://kubernetes.default.svc.cluster.local \
		--service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
		--authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction --allow-privileged=true \
		--requestheader-client-ca-file="$PKI/front-proxy-ca.crt" --requestheader-allowed-names=front-proxy-client \
		--requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
		--requestheader-extra-headers-prefix=X-Remote-Extra- \
		--proxy-client-cert-file="$PKI/front-proxy-client.crt" --proxy-client-key-file="$PKI/front-proxy-client.key" \
		--endpoint-reconciler-type=lease --v=1
	waitfor 120 kube-apiserver kubectl get --raw /readyz
	# One instance of each, so no leader election: it only adds lease
	# traffic and a delay at start.
	start kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig="$ETC/controller-manager.kubeconfig" \
		--authentication-kubeconfig="$ETC/controller-manager.kubeconfig" --authorization-kubeconfig="$ETC/controller-manager.kubeconfig" \
		--bind-address=127.0.0.1 --secure-port=10257 --leader-elect=false \
		--cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" --root-ca-file="$PKI/ca.crt" \
		--service-account-private-key-file="$PKI/sa.key" --use-service-account-credentials=true \
		--service-cluster-ip-range="$SERVICE_CIDR" --cluster-cidr="$CLUSTER_CIDR" --allocate-node-cidrs=false --v=1
	start kube-scheduler "$BIN/kube-scheduler" --kubeconfig="$ETC/scheduler.kubeconfig" \
		--authentication-kubeconfig="$ETC/scheduler.kubeconfig" --authorization-kubeconfig="$ETC/scheduler.kubeconfig" \
		--bind-address=127.0.0.1 --secure-port=10259 --leader-elect=false --v=1

	for n in $(seq "$NODES"); do node_up "$n"; done
	say "$NODES kubelets started"

	# One kube-proxy for all nodes: they share the host's network namespace,
	# so one set of rules serves every node's pods and services.
	cat >"$ETC/kube-proxy.yaml" <<-YAML
		apiVersion: kubeproxy.config.k8s.io/v1alpha1
		kind: KubeProxyConfiguration
		clientConnection: {kubeconfig: $ETC/kube-proxy.kubeconfig}
		hostnameOverride: $(node_name 1)
		bindAddress: $APISERVER_IP
		clusterCIDR: $CLUSTER_CIDR
		mode: iptables
		metricsBindAddress: 127.0.0.1:10249
		healthzBindAddress: 127.0.0.1:10256
		nodePortAddresses: [$NODE_NET.0/24]
		# zeros: leave the host's conntrack table size and timeouts alone
		conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
		# false: no route_localnet sysctl, no NodePorts on 127.0.0.1
		iptables: {localhostNodePorts: false}
	YAML
	start kube-proxy "$BIN/kube-proxy" --config="$ETC/kube-proxy.yaml" --v=1

	waitfor 60 "$NODES nodes registered" nodes_registered
	waitfor 120 "$NODES nodes Ready" kubectl wait --for=condition=Ready node --all --timeout=1s

	kubectl apply -f "$HERE/coredns.yaml" >/dev/null
	waitfor 120 coredns kubectl -n kube-system wait --for=condition=Available deploy/coredns --timeout=1s
	# Answering through the Service proves kube-proxy's rules too.
	waitfor 60 "DNS on $DNS_IP" /bin/busybox nslookup kubernetes.default.svc.cluster.local "$DNS_IP"

	storage_class
	[ "$LAB_PVS" -gt 0 ] && cmd_pvs "$LAB_PVS" "$LAB_PV_SIZE"
	say "up: $NODES nodes, $(kubectl version -o json | grep -m1 gitVersion | tr -d ' ",'); eval \"\$($0 env)\""
}

nodes_registered() { [ "$(kubectl get nodes --no-headers 2>/dev/null | wc -l)" -ge "$NODES" ]; }

node_up() {
	local n=$1 nd=$ETC/node$1 sd=$STATE/node$1 rd=$RUN/node$1 t
	mkdir -p "$nd/cni" "$sd" "$rd"
	node_cgroups "$n"
	cat >"$nd/containerd.toml" <<-TOML
		version = 2
		root = "$sd/containerd"
		state = "$rd/containerd"
		disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
		[grpc]
		  address = "$rd/containerd.sock"
		[ttrpc]
		  address = "$rd/containerd.sock.ttrpc"
		[plugins."io.containerd.internal.v1.opt"]
		  path = "$sd/opt"
		[plugins."io.containerd.grpc.v1.cri"]
		  sandbox_image = "$PAUSE_IMAGE"
		  stream_server_address = "127.0.0.1"
		  stream_server_port = "0"
		  enable_selinux = false
		  # Root here lacks CAP_SYS_RESOURCE, so runc's write of a negative
		  # oom_score_adj (pause -998) fails as "can't get final child's PID
		  # from pipe: EOF". This clamps it to containerd's own score.
		  restrict_oom_score_adj = true
		  [plugins."io.containerd.grpc.v1.cri".containerd]
		    snapshotter = "overlayfs"
		    default_runtime_name = "runc"
		    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
		      runtime_type = "io.containerd.runc.v2"
		      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
		        BinaryName = "$RUNC"
		        Root = "$rd/runc"
		        SystemdCgroup = false
		  [plugins."io.containerd.grpc.v1.cri".cni]
		    bin_dir = "$CNI_BIN"
		    conf_dir = "$nd/cni"
		    max_conf_num = 1
	TOML
	# A bridge per node with the node's pod range: all bridges are on this
	# host, so pods on different nodes reach each other by plain routing.
	cat >"$nd/cni/10-k8slab.conflist" <<-JSON
		{
		  "cniVersion": "0.4.0",
		  "name": "k8slab-node$n",
		  "plugins": [
		    { "type": "bridge", "bridge": "$(pod_bridge "$n")", "isGateway": true, "ipMasq": false, "hairpinMode": true,
		      "ipam": { "type": "host-local", "ranges": [[{ "subnet": "$(pod_cidr "$n")" }]],
		                "routes": [{ "dst": "0.0.0.0/0" }], "dataDir": "$sd/cni-ipam" } },
		    { "type": "portmap", "capabilities": { "portMappings": true } }
		  ]
		}
	JSON
	# Each node has its own containerd: two kubelets on one CRI namespace
	# remove each other's pods as orphans.
	if [ -n "$LAB_NODE_DIRS" ]; then
		# This node's containerd and kubelet share a mount namespace in which
		# each LAB_NODE_DIRS dir is this node's own (state/nodeN/root/DIR), so
		# a DaemonSet's hostPath is per node as on real hosts.
		start "containerd-$n" unshare --mount --propagation slave -- /bin/sh -c '
			root=$1; shift
			for d in $LAB_NODE_DIRS; do mkdir -p "$root$d" "$d" && mount --bind "$root$d" "$d" || exit 1; done
			exec "$@"' sh "$sd/root" "$CONTAINERD" --config "$nd/containerd.toml"
	else
		start "containerd-$n" "$CONTAINERD" --config "$nd/containerd.toml"
	fi
	waitfor 30 "node$n containerd" ctr --address "$rd/containerd.sock" version
	for t in "$IMG"/*.tar; do ctrn "$n" images import "$t" >/dev/null; done
	cat >"$nd/kubelet.yaml" <<-YAML
		apiVersion: kubelet.config.k8s.io/v1beta1
		kind: KubeletConfiguration
		address: $(node_ip "$n")
		port: $(kubelet_port "$n")
		healthzBindAddress: 127.0.0.1
		healthzPort: $(($(kubelet_port "$n") - 2))
		readOnlyPort: 0
		authentication:
		  anonymous: {enabled: false}
		  webhook: {enabled: true}
		  x509: {clientCAFile: $PKI/ca.crt}
		authorization: {mode: Webhook}
		containerRuntimeEndpoint: unix://$rd/containerd.sock
		cgroupDriver: cgroupfs
		cgroupRoot: /kl-node$n
		# 1.34 still runs on cgroup v1 when told to; 1.35 does not.
		failCgroupV1: false
		failSwapOn: false
		clusterDNS: [$DNS_IP]
		clusterDomain: cluster.local
		resolvConf: /etc/resolv.conf
		podLogsDir: $sd/pod-logs
		rotateCertificates: false
		serializeImagePulls: false
		# Images cannot be pulled back: never collect them.
		imageGCHighThresholdPercent: 100
		imageGCLowThresholdPercent: 99
		# The nodes share one disk and one memory: evict only when truly out.
		evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
	YAML
	start_kubelet "$n"
}

# start_kubelet N: node N's kubelet, in its containerd's mount namespace
# when the nodes have dirs of their own (LAB_NODE_DIRS, as up had it).
start_kubelet() {
	local n=$1 nd=$ETC/node$1 sd=$STATE/node$1 pre=() root
	root=$sd/kubelet
	[ -n "$LAB_NODE_DIRS" ] && pre=(nsenter --target "$(cat "$RUN/containerd-$n.pid")" --mount --)
	# With /var/lib/kubelet among them, each kubelet keeps its state at the
	# standard path, so a chart's default plugins_registry and plugins dirs
	# are the ones the node's kubelet watches.
	case " $LAB_NODE_DIRS " in *" /var/lib/kubelet "*) root=/var/lib/kubelet ;; esac
	start "kubelet-$n" "${pre[@]}" "$BIN/kubelet" --config="$nd/kubelet.yaml" --kubeconfig="$ETC/kubelet-$n.kubeconfig" \
		--root-dir="$root" --cert-dir="$root/pki" --hostname-override="$(node_name "$n")" --node-ip="$(node_ip "$n")" --v=1
}

# cmd_kubelet stop|start N: stop node N's kubelet alone (its containerd
# and pods run on, as when a kubelet crashes or is restarted on a real
# host), or start it again.
cmd_kubelet() {
	local action=${1:-} n=${2:-}
	[[ "$n" =~ ^[1-9]$ ]] || die "usage: lab.sh kubelet stop|start N"
	alive "containerd-$n" || die "node $n is not up"
	[ -z "$LAB_NODE_DIRS" ] && [ -f "$RUN/node-dirs" ] && LAB_NODE_DIRS=$(cat "$RUN/node-dirs")
	case $action in
	stop) stop_pids "kubelet-$n"; say "kubelet-$n stopped (its containerd and pods run on)" ;;
	start)
		alive "kubelet-$n" && die "kubelet-$n is running"
		start_kubelet "$n"
		say "kubelet-$n started"
		;;
	*) die "usage: lab.sh kubelet stop|start N" ;;
	esac
}

# cmd_node stop|start N: node N lost, as a power cut takes a host: its
# kubelet stopped and every container on it killed at once (SIGKILL, no
# grace), so its pods' processes are gone with nothing told. containerd
# runs on, as a disk would keep the node's state; start brings the
# kubelet back, and the kubelet restarts the pods as after a reboot.
cmd_node() {
	local action=${1:-} n=${2:-} t
	[[ "$n" =~ ^[1-9]$ ]] || die "usage: lab.sh node stop|start N"
	case $action in
	stop)
		cmd_kubelet stop "$n"
		for t in $(ctrn "$n" tasks ls -q 2>/dev/null); do ctrn "$n" tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true; done
		say "node$n: every container killed"
		;;
	start) cmd_kubelet start "$n" ;;
	*) die "usage: lab.sh node stop|start N" ;;
	esac
}

export LAB_NODE_DIRS

# -------------------------------------------------------------- storage

# No dynamic provisioning in this cluster: a default StorageClass with no
# provisioner, and hostPath PersistentVolumes made ahead, so a chart's
# PVCs (storageClassName unset or "lab") bind.
storage_class() {
	kubectl apply -f - >/dev/null <<-YAML
		apiVersion: storage.k8s.io/v1
		kind: StorageClass
		metadata:
		  name: lab
		  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
		provisioner: kubernetes.io/no-provisioner
		reclaimPolicy: Retain
		volumeBindingMode: Immediate
	YAML
}

cmd_pvs() {
	local count=${1:?usage: lab.sh pvs N [SIZE]} size=${2:-$LAB_PV_SIZE} i last name
	[ -f "$ETC/admin.kubeconfig" ] || die "lab is not up"
	storage_class
	# Numbered after the highest existing one, so pvs can be called again
	# for more volumes (Retain: a released volume is not bound again).
	last=$(kubectl get pv -o name 2>/dev/null | sed -n 's#^persistentvolume/lab-pv-##p' | sort -n | tail -1)
	last=$((10#${last:-0}))
	for i in $(seq $((last + 1)) $((last + count))); do
		name=$(printf 'lab-pv-%03d' "$i")
		# 0777: hostPath ignores a pod's fsGroup, and charts run non-root.
		mkdir -p "$PV/$name"
		chmod 0777 "$PV/$name"
		kubectl apply -f - >/dev/null <<-YAML
			apiVersion: v1
			kind: PersistentVolume
			metadata: {name: $name, labels: {lab: "true"}}
			spec:
			  storageClassName: lab
			  capacity: {storage: $size}
			  accessModes: [ReadWriteOnce, ReadOnlyMany, ReadWriteMany]
			  persistentVolumeReclaimPolicy: Retain
			  hostPath: {path: $PV/$name, type: Directory}
		YAML
	done
	say "$count PersistentVolumes of $size (class lab, default): $(printf 'lab-pv-%03d' $((last + 1)))..$name"
}

# ------------------------------------------------------------ load-image

cmd_load_image() {
	local n t nodes
	[ $# -gt 0 ] || die "usage: lab.sh load-image TAR..."
	nodes=$(running_nodes)
	[ -n "$nodes" ] || die "lab is not up"
	for t in "$@"; do [ -f "$t" ] || die "$t: no such file"; done
	for n in $nodes; do
		for t in "$@"; do ctrn "$n" images import "$t" >/dev/null || die "node$n: import $t failed"; done
	done
	say "imported into node $(echo $nodes | tr ' ' ','): $*"
}

# ---------------------------------------------------------------- status

cmd_status() {
	local ok=0 f name
	for f in "$RUN"/*.pid; do
		[ -e "$f" ] || { echo "not up (no pid files in $RUN)"; return 1; }
		name=${f##*/}
		name=${name%.pid}
		if alive "$name"; then echo "running  $name (pid $(cat "$f"))"; else echo "DEAD     $name (log $LOG/$name.log)"; ok=1; fi
	done
	kubectl get nodes -o wide 2>/dev/null || ok=1
	return $ok
}

# ------------------------------------------------------------------ env

cmd_env() {
	cat <<-EOF
		export LAB_HOME=$LAB_HOME PLUGREG_K8S_LAB=$LAB_HOME
		export KUBECONFIG=$ETC/admin.kubeconfig
		export PATH=$BIN:\$PATH
		export KUBECACHEDIR=$CACHE/kube
		export HELM_CACHE_HOME=$CACHE/helm HELM_CONFIG_HOME=$CACHE/helm-config HELM_DATA_HOME=$CACHE/helm-data
		export CONTAINER_RUNTIME_ENDPOINT=unix://$(node_sock 1)
	EOF
}

# ----------------------------------------------------------------- down

# stop_pids NAME...: SIGTERM all at once, SIGKILL what still runs after
# STOP_WAIT seconds (15).
stop_pids() {
	local n p ps=() i alive
	for n in "$@"; do
		[ -f "$RUN/$n.pid" ] || continue
		p=$(cat "$RUN/$n.pid")
		kill "$p" 2>/dev/null && ps+=("$p")
	done
	for i in $(seq $((${STOP_WAIT:-15} * 2))); do
		alive=0
		for p in "${ps[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
		[ $alive = 0 ] && break
		sleep 0.5
	done
	for p in "${ps[@]}"; do kill -0 "$p" 2>/dev/null && { say "pid $p did not stop in ${STOP_WAIT:-15}s: SIGKILL"; kill -9 "$p"; }; done
	for n in "$@"; do rm -f "$RUN/$n.pid"; done
}

# node_down N: the node's pods, containerd and shims (the kubelet is
# already stopped, so none is restarted). Nodes are stopped in parallel.
node_down() {
	local n=$1 s p t
	s=$(node_sock "$n")
	if [ -S "$s" ]; then
		# CRI removal runs CNI DEL and removes the pod's netns.
		"$BIN/crictl" --runtime-endpoint "unix://$s" --timeout 30s rmp -af >/dev/null 2>&1 || say "node$n: crictl rmp failed"
		for t in $(ctrn "$n" tasks ls -q 2>/dev/null); do ctrn "$n" tasks kill -s SIGKILL "$t" >/dev/null 2>&1; done
		for t in $(ctrn "$n" tasks ls -q 2>/dev/null); do ctrn "$n" tasks delete -f "$t" >/dev/null 2>&1; done
	fi
	stop_pids "containerd-$n"
	# Shims outlive containerd (re-parented to init); ours are the ones
	# whose -address is this node's socket.
	for p in $(pgrep -f -- "containerd-shim-runc-v2 .*-address $s\$"); do kill -9 "$p" 2>/dev/null; done
}

# down runs in a subshell without -e: every step is tried whatever the ones
# before did, so a half-started or half-stopped lab is still cleaned.
cmd_down() (
	set +e
	local n s p ns t ipt ext d nodes m c left
	[ -d "$RUN" ] || [ -d "$STATE" ] || { say "down: nothing is up"; exit 0; }
	nodes=$(running_nodes)
	# 1. kube-proxy, then its rules.
	stop_pids kube-proxy
	[ -x "$BIN/kube-proxy" ] && "$BIN/kube-proxy" --cleanup --v=0 >"$LOG/kube-proxy-cleanup.log" 2>&1
	# 2. Kubelets first, so none restarts the containers removed next.
	stop_pids $(for n in $nodes; do echo "kubelet-$n"; done) $(ls "$RUN" 2>/dev/null | sed -n 's/^\(kubelet-[0-9]*\)\.pid$/\1/p')
	for n in $nodes; do node_down "$n" & done
	wait
	say "nodes stopped"
	# The apiserver drains requests for about 10 s on SIGTERM; its state is
	# thrown away below, so a short grace is enough.
	STOP_WAIT=3 stop_pids kube-scheduler kube-controller-manager kube-apiserver
	STOP_WAIT=3 stop_pids etcd
	say "control plane stopped"
	# 3. Mounts under LAB_HOME, deepest first (etcd's tmpfs, pod volumes).
	for m in $(awk '{ print $2 }' /proc/mounts | grep "^$LAB_HOME/" | sort -r); do umount "$m" 2>/dev/null || umount -l "$m"; done
	# 4. Cgroups: rmdir leaves first; a cgroup with a process left fails.
	for c in /sys/fs/cgroup/*/kl-node*; do
		[ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null
	done
	left=$(ls -d /sys/fs/cgroup/*/kl-node* 2>/dev/null | wc -l)
	[ "$left" = 0 ] || say "WARNING: $left cgroup dirs left (a process still runs in them)"
	# 5. Network: pod netns made since up, bridges, chains.
	for ns in $(ls /var/run/netns 2>/dev/null | grep '^cni-'); do
		grep -qx "$ns" "$RUN/netns.before" 2>/dev/null || ip netns del "$ns" 2>/dev/null
	done
	for d in $(ip -o link show 2>/dev/null | awk -F': ' '{ print $2 }' | grep '^k8slab'); do ip link del "$d" 2>/dev/null; done
	for ipt in iptables ip6tables; do
		for t in filter nat mangle raw; do
			"$ipt-save" -t "$t" 2>/dev/null | grep -qE "(KUBE-|CNI-|$GUARD)" || continue
			"$ipt-save" -t "$t" | grep -vE "^:(KUBE-|CNI-|$GUARD)|-j (KUBE-|CNI-|$GUARD)|^-A (KUBE-|CNI-|$GUARD)" >"$LOG/$ipt-$t.restore"
			"$ipt-restore" -T "$t" <"$LOG/$ipt-$t.restore" || say "WARNING: $ipt-restore -T $t failed"
		done
	done
	# 6. What the kubelets and CNI leave outside LAB_HOME.
	find /var/log/containers -maxdepth 1 -lname "$STATE/*" -delete 2>/dev/null
	rm -f /var/lib/cni/results/k8slab-node* 2>/dev/null
	for d in $(cat "$RUN/dirs.absent" 2>/dev/null); do
		mountpoint -q "$d" && umount "$d"
		case $d in
		# Whatever --root-dir says, every kubelet puts its device-plugin
		# socket in /var/lib/kubelet/device-plugins: nothing else is there.
		/var/lib/kubelet) rm -rf "$d" ;;
		*) rmdir "$d" 2>/dev/null ;;
		esac
	done
	for d in $LAB_CLEAN_DIRS; do
		case $d in
		/*/*) rm -rf "$d" ;;
		*) say "LAB_CLEAN_DIRS: refusing $d (not an absolute path two levels deep)" ;;
		esac
	done
	# 7. Sysctls as they were before up.
	if [ -f "$RUN/sysctl.saved" ]; then
		while IFS= read -r kv; do sysctl -qw "$kv" || say "WARNING: could not restore $kv"; done <"$RUN/sysctl.saved"
	fi
	rm -rf "$STATE" "$RUN" "$PV" "$CACHE"
	say "down"
)

# ------------------------------------------------------------------ main

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

[ "$(id -u)" = 0 ] || [ "${1:-}" = env ] || die "run as root (it starts kubelets and changes the host's network)"
cmd=${1:-help}
[ $# -gt 0 ] && shift
case $cmd in
install) cmd_install ;;
build) cmd_build ;;
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
load-image) cmd_load_image "$@" ;;
pvs) cmd_pvs "$@" ;;
kubelet) cmd_kubelet "$@" ;;
node) cmd_node "$@" ;;
env) cmd_env ;;
help | -h | --help) usage ;;
*) usage >&2; exit 2 ;;
esac
