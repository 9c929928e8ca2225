package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"

	"github.com/hashicorp/go-hclog"
	"github.com/plugreg/plugreg/agent"
	"github.com/plugreg/plugreg/agent/pluginsock"
	"github.com/plugreg/plugreg/agent/pluginwatcher"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/cluster"
	"github.com/plugreg/plugreg/gossip"
	"github.com/plugreg/plugreg/httpapi"
	"github.com/plugreg/plugreg/internal/buildinfo"
	"github.com/plugreg/plugreg/internal/gctune"
	"github.com/plugreg/plugreg/tlsutil"
	"github.com/plugreg/plugreg/tracing/otlp"
)

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// runAgent runs 'plugreg agent': the settings are read and all of them
// checked before the agent makes anything on disk or starts anything.
func runAgent(args []string) error {
	s, err := parseAgentFlags(args)
	if err != nil {
		return err
	}
	a, err := s.setup()
	if err != nil {
		return err
	}
	return startAndRunAgent(s, a)
}

// agentSettings are the agent's flags as given: on the command line, and
// from -config for what the command line did not set. Each field is one
// flag's value, unchecked; setup checks them.
type agentSettings struct {
	// flags tells which flags were set: a client agent refuses server
	// flags (clientOnlyFlags) even when they are given their defaults.
	flags *flag.FlagSet
	// serverFlags are the server's own flags, which flags also serves.
	serverFlags *flag.FlagSet
	trace       otlp.Config // -trace-endpoint, -trace-sample-rate

	configFile                string
	nodeID, dataDir, bind     string
	httpPort, serverPort      int
	probePort                 int
	gossipPort, expect        int
	join                      listFlag
	retryJoin, client         bool
	logLevel, pprof, applyLog string

	// Raft's and the registry's, a server's only (serverFlags).
	snapshotThreshold, trailingLogs  uint64
	snapshotInterval                 time.Duration
	stateCheckInterval               time.Duration
	maxAppendEntries, journalSize    int
	leaseExpiryRate                  int
	nodeReapAfter, deadServerCleanup time.Duration
	reapBrakes                       cluster.ReapBrakes
	raftMultiplier, walSegmentSize   int
	heartbeatTimeout, commitTimeout  time.Duration
	commitNotify                     bool
	logStore                         string

	// The HTTP API's: who may use it, and its limits.
	aclToken, aclAgentToken, aclPolicy string
	aclInitialToken                    string
	aclEnabled                         bool
	limits                             httpapi.Limits
	allowedHosts                       string
	// requiredTypes is repeatable, each a comma list: a -config list
	// (["csi","dra"]) sets it once per item.
	requiredTypes listFlag

	// host is the host's plugin sources as given: setup checks it and
	// fills in the plugin socket's path and its allowed uids.
	host           hostServices
	pluginSockUIDs string

	encrypt               string
	encryptIn, encryptOut bool
	tls                   tlsutil.Config
}

// flagSet defines the agent's flags straight on s's fields (on the
// structs they configure where there is one: tlsutil.Config,
// httpapi.Limits, hostServices), so that each value has one home from
// the command line to the part that uses it.
func (s *agentSettings) flagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: plugreg agent [flags]\n\nRuns a server (a Raft voter) or, with -client, a client agent (a host's agent:\ngossip, the HTTP API through the servers, plugin discovery; never a voter).\nFlags may also come from -config, a JSON object with the same keys (\"node\",\n\"data-dir\", \"join\": [...], ...); the command line wins.\n\n")
		fs.PrintDefaults()
	}
	d := cluster.DefaultConfig()
	// server holds the flags that mean nothing to a client agent, which
	// refuses them (clientOnlyFlags): Raft's, the registry's and the
	// leader's. Each is declared here, once, and served by fs.
	server := flag.NewFlagSet("server", flag.ContinueOnError)
	s.serverFlags = server
	fs.StringVar(&s.configFile, "config", "", "JSON config file with the same keys as the flags")
	fs.StringVar(&s.nodeID, "node", hostname(), "node ID, unique in the cluster, kept in the data dir")
	fs.StringVar(&s.dataDir, "data-dir", "", "directory of the agent's state: its node ID, gossip keyring and peers, and on a server Raft's log and snapshots (required)")
	fs.StringVar(&s.bind, "bind", "127.0.0.1", "IP address for every listener and for outgoing connections")
	fs.IntVar(&s.httpPort, "http-port", 7700, "HTTP API port")
	fs.IntVar(&s.probePort, "probe-port", 0, "also serve GET /v1/health alone on this port, in plain HTTP without tokens: for kubelet's probes, which present no client certificate to an API with -verify-incoming; bounded by -http-max-conns-per-client per IP address and 10s read and idle timeouts (0: off)")
	server.IntVar(&s.serverPort, "server-port", d.ServerPort, "Raft and internal RPC port")
	fs.IntVar(&s.gossipPort, "gossip-port", d.GossipPort, "memberlist port (TCP and UDP)")
	server.IntVar(&s.expect, "bootstrap-expect", 0, "bootstrap once this many servers are known (1, 3 or 5); 0 joins an existing cluster")
	fs.BoolVar(&s.retryJoin, "retry-join", false, "keep retrying -join until it succeeds")
	server.Uint64Var(&s.snapshotThreshold, "snapshot-threshold", 8192, "log entries between snapshots")
	server.DurationVar(&s.snapshotInterval, "snapshot-interval", 0, "how often Raft checks the snapshot threshold (0: 2m, raft's default)")
	server.Uint64Var(&s.trailingLogs, "trailing-logs", 0, "log entries kept after a snapshot, for slow followers (0: 10240)")
	server.DurationVar(&s.stateCheckInterval, "state-check-interval", cluster.DefaultStateCheckInterval, "how often the leader appends a state check, at which every server compares the digest of its registry with the leader's (negative: never)")
	server.IntVar(&s.maxAppendEntries, "max-append-entries", 0, "entries per Raft AppendEntries and per FSM batch (0: 64)")
	server.DurationVar(&s.nodeReapAfter, "node-reap-after", d.NodeReapAfter, "deregister the plugins of a node dead this long (negative: never)")
	server.Float64Var(&s.reapBrakes.Rate, "node-reap-rate", d.ReapBrakes.Rate, "reap at most this many dead nodes a second, after -node-reap-burst at once, so that even a real mass failure is reaped gradually (0: 1% of the client agents, at least 1, a second's worth at once; negative: no limit)")
	server.IntVar(&s.reapBrakes.Burst, "node-reap-burst", d.ReapBrakes.Burst, "dead nodes that may be reaped at once before -node-reap-rate applies")
	server.Float64Var(&s.reapBrakes.PauseAbove, "node-reap-pause-above", d.ReapBrakes.PauseAbove, "reap no failed node while more than this fraction of the client agents is failed at once (likelier a partition than deaths), until enough come back or an operator runs plugreg operator reap resume (1: never pause)")
	server.IntVar(&s.reapBrakes.PauseMinFailed, "node-reap-pause-min-failed", d.ReapBrakes.PauseMinFailed, "pause reaping only with at least this many client agents failed, so that with few agents one death is still reaped")
	server.DurationVar(&s.deadServerCleanup, "dead-server-cleanup", 0, "remove a failed server from Raft after this long, never below quorum (0: never)")
	server.IntVar(&s.leaseExpiryRate, "lease-expiry-rate", cluster.DefaultLeaseExpiryRate, "the most leased plugins (registered with a TTL) the leader expires a second, one log entry every 100ms")
	server.IntVar(&s.journalSize, "journal-size", 0, "events kept per node for resuming watchers (0: 65536)")
	server.IntVar(&s.raftMultiplier, "raft-multiplier", 1, "scale Raft's timeouts: N x 500ms heartbeat and election, N x 250ms lease (1 is fastest; 2 gives a 1s heartbeat and election timeout; 5 suits slow or shared machines)")
	fs.StringVar(&s.logLevel, "log-level", "info", "trace, debug, info, warn or error")
	fs.StringVar(&s.aclToken, "acl-token", "", "without -acl-enabled: require this token (X-Plugreg-Token) for writes and operator calls, others only read (the single shared token; -acl-enabled replaces it with tokens with policies)")
	fs.BoolVar(&s.aclEnabled, "acl-enabled", false, "check every HTTP request's token against the cluster's ACL tokens (plugreg acl bootstrap makes the first)")
	fs.StringVar(&s.aclAgentToken, "acl-agent-token", "", "the agent token: the ACL secret this agent's own registrations (its host's plugins) carry to the servers; make it with plugreg acl token create -node NODE, which binds it to this node. Unset: $PLUGREG_AGENT_TOKEN (not visible to other users, as arguments are)")
	fs.IntVar(&s.limits.MaxConnsPerClient, "http-max-conns-per-client", httpapi.DefaultMaxConnsPerClient, "concurrent HTTP connections from one IP address; past it 429 (negative: no bound)")
	fs.IntVar(&s.limits.MaxStreams, "http-max-streams", httpapi.DefaultMaxStreams, "open event streams on this agent; past it 429 (negative: no bound)")
	fs.IntVar(&s.limits.MaxBlockingQueries, "http-max-blocking-queries", httpapi.DefaultMaxBlockingQueries, "reads waiting for a change (?index=) on this agent; past it 429 (negative: no bound)")
	fs.DurationVar(&s.limits.BodyReadTimeout, "http-body-read-timeout", httpapi.DefaultBodyReadTimeout, "time to read one request's body (a snapshot restore's: 10m)")
	fs.StringVar(&s.allowedHosts, "http-allowed-hosts", "", "comma-separated DNS names (*.example.com for every name under example.com) a plain-HTTP request may give as its Host, besides IP addresses, localhost and this machine's host name; others are refused 421 host_not_allowed, against DNS rebinding (* allows any; HTTPS requests are not checked)")
	fs.Var(&s.requiredTypes, "required-plugin-types", "comma-separated (or repeated) plugin types this agent's node must have an instance of: until it has one of each, GET /v1/health answers 503 missing_required_types (readiness; ?live is unaffected)")
	server.StringVar(&s.aclInitialToken, "acl-initial-management-token", "", "with -acl-enabled: the secret of an operator token the leader creates if the cluster has no ACL token yet, in place of plugreg acl bootstrap (Consul's initial_management token; for installers such as the Helm chart). At least 16 characters. Unset: $PLUGREG_ACL_INITIAL_MANAGEMENT_TOKEN (not visible to other users, as arguments are)")
	fs.StringVar(&s.aclPolicy, "acl-default-policy", "allow", "what a request without a token may do with -acl-enabled: allow (everything) or deny (nothing but health and bootstrap)")
	server.StringVar(&s.applyLog, "apply-log", "", "test instrument: append a JSON line per applied log entry to this file")
	server.DurationVar(&s.heartbeatTimeout, "heartbeat-timeout", 0, "Raft heartbeat and election timeout (overrides -raft-multiplier)")
	server.StringVar(&s.logStore, "log-store", "", "Raft log store of a new data dir: wal or boltdb (empty: wal; a data dir keeps the one it was created with)")
	server.IntVar(&s.walSegmentSize, "wal-segment-size", 0, "bytes per raft-wal segment file (0: 16 MiB); old entries go a whole segment at a time, so smaller segments compact sooner")
	fs.StringVar(&s.pprof, "pprof", "", "serve net/http/pprof on this address (host:port); empty: off")
	server.DurationVar(&s.commitTimeout, "commit-timeout", 0, "Raft commit timeout: how soon an idle leader tells followers the commit index (0: 5ms)")
	server.BoolVar(&s.commitNotify, "commit-notify", true, "tell followers the commit index as soon as the leader applied an entry (false: only raft's own AppendEntries do)")
	fs.StringVar(&s.host.pluginsDir, "plugins-dir", "", "watch this directory for kubelet plugin registration sockets and register what they offer (it must exist)")
	fs.StringVar(&s.host.pluginsDirMode, "plugins-dir-mode", string(pluginwatcher.ModeAuto), "who answers the plugins of -plugins-dir: shared (kubelet watches it too: plugreg never sends them NotifyRegistrationStatus), owned (they register with plugreg alone: plugreg tells them, never \"not registered\" for a failure of its own), auto (shared for a dir named plugins_registry, kubelet's, else owned)")
	fs.StringVar(&s.host.pluginSocket, "plugin-socket", "", "unix socket (mode 0660) for plugins using the SDK (package stub); empty: DATA-DIR/plugin.sock; off: none")
	fs.DurationVar(&s.host.pluginGrace, "plugin-grace", 10*time.Second, "keep a plugin registered this long after its session ended without Stop, for it to reconnect")
	fs.StringVar(&s.host.pluginSocketOwner, "plugin-socket-owner", "", "owner of the plugin socket file: a user name or uid (changing it takes root)")
	fs.StringVar(&s.host.pluginSocketGroup, "plugin-socket-group", "", "group of the plugin socket file: a group name or gid; with the default mode 0660 its members may connect")
	fs.StringVar(&s.pluginSockUIDs, "plugin-socket-allow-uid", "", "comma-separated uids whose processes may use the plugin socket (SO_PEERCRED; others are disconnected and logged); empty: whoever may open the file")
	fs.StringVar(&s.host.pluginConfigDir, "plugin-config-dir", "", "directory of plugin configuration files (IDX-NAME.conf or NAME.conf), sent to plugins when they register")
	fs.StringVar(&s.encrypt, "encrypt", "", "gossip encryption key, base64 (plugreg keygen makes one); used to create DATA-DIR/gossip.keyring, which wins from then on (plugreg keyring rotates keys). Unset: $PLUGREG_GOSSIP_KEY (a process's arguments are visible to every user of the machine, its environment is not)")
	fs.BoolVar(&s.encryptIn, "encrypt-verify-incoming", true, "refuse plaintext gossip when encryption is on (false only while turning encryption on in a running cluster)")
	fs.BoolVar(&s.encryptOut, "encrypt-verify-outgoing", true, "send only encrypted gossip when encryption is on (false only while turning encryption on in a running cluster)")
	fs.BoolVar(&s.client, "client", false, "run a client agent: no Raft; join with -join (servers' or other agents' gossip addresses)")
	fs.StringVar(&s.tls.CAFile, "tls-ca-file", "", "PEM file of the CA that signs the cluster's certificates")
	fs.StringVar(&s.tls.CertFile, "tls-cert-file", "", "PEM certificate of this agent: with it, the server port takes TLS and HTTP is HTTPS only (reloaded on SIGHUP)")
	fs.StringVar(&s.tls.KeyFile, "tls-key-file", "", "PEM private key of -tls-cert-file")
	fs.BoolVar(&s.tls.VerifyIncoming, "verify-incoming", false, "require TLS with a client certificate from the CA on the server port and on HTTPS")
	fs.BoolVar(&s.tls.VerifyOutgoing, "verify-outgoing", false, "use TLS for connections to server ports and verify the server's certificate against the CA")
	fs.BoolVar(&s.tls.VerifyServerHostname, "verify-server-hostname", false, "also require servers' certificates to name server.<cluster-name>.plugreg (implies -verify-outgoing)")
	fs.StringVar(&s.tls.ClusterName, "cluster-name", tlsutil.DefaultClusterName, "the cluster's name, in its server certificates' name server.<cluster-name>.plugreg")
	fs.Var(&s.join, "join", "gossip address of a server to join (repeatable)")
	fs.StringVar(&s.trace.Endpoint, "trace-endpoint", "", "send OpenTelemetry spans over OTLP/HTTP to this collector (base URL, as OTEL_EXPORTER_OTLP_ENDPOINT: spans go to its /v1/traces); empty: the OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT variable if set, else tracing is off")
	fs.Float64Var(&s.trace.SampleRate, "trace-sample-rate", 0, "with tracing on, the share (0 to 1) of requests without a sampled W3C traceparent that start a trace here; a caller's traceparent decides for its own requests")
	server.VisitAll(func(f *flag.Flag) { fs.Var(f.Value, f.Name, f.Usage) })
	return fs
}

// parseAgentFlags reads the command line, then fills in from the -config
// file what it did not set.
func parseAgentFlags(args []string) (*agentSettings, error) {
	s := &agentSettings{}
	fs := s.flagSet()
	s.flags = fs
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, usageErrorf(fs, "unexpected arguments %v (flags start with -)", fs.Args())
	}
	if s.configFile != "" {
		if err := applyConfigFile(fs, s.configFile); err != nil {
			return nil, err
		}
	}
	if err := s.secretsFromEnv(); err != nil {
		return nil, err
	}
	return s, nil
}

// The environment variables an agent reads its secrets from when their
// flags are not given. A process's arguments are readable by every user
// of its machine (/proc/PID/cmdline, ps), its environment only by its own
// user and root: the Helm chart passes Secrets this way.
const (
	envGossipKey  = "PLUGREG_GOSSIP_KEY"  // -encrypt
	envAgentToken = "PLUGREG_AGENT_TOKEN" // -acl-agent-token
	// -acl-initial-management-token
	envInitialToken = "PLUGREG_ACL_INITIAL_MANAGEMENT_TOKEN"
)

// secretsFromEnv fills -encrypt and -acl-agent-token from the environment
// where neither the command line nor the config file set them; a bad key
// is refused naming the variable.
func (s *agentSettings) secretsFromEnv() error {
	if k := os.Getenv(envGossipKey); s.encrypt == "" && k != "" {
		if _, err := gossip.ParseKey(k); err != nil {
			return fmt.Errorf("%s: %w", envGossipKey, err)
		}
		s.encrypt = k
	}
	if tok := os.Getenv(envAgentToken); s.aclAgentToken == "" && tok != "" {
		s.aclAgentToken = tok
	}
	if tok := os.Getenv(envInitialToken); s.aclInitialToken == "" && tok != "" {
		s.aclInitialToken = tok
	}
	return nil
}

// agentSetup is what the agent's settings make of its parts before
// anything starts.
type agentSetup struct {
	logger hclog.Logger
	host   hostServices
	// api's keyring is set once the data dir's keyring is open
	// (startAndRunAgent): opening it may create the data dir.
	api  apiOptions
	tlsc *tlsutil.Configurator // nil: no TLS
}

// setup checks the settings and derives the agent's parts from them. It
// creates nothing on disk and starts nothing: a mistyped flag is the
// operator's to fix, not a half-started agent's, and leaves no data dir
// behind (TestAgentRefusesBadFlagsAtStart). Of several mistakes the first
// in this order is the one reported.
func (s *agentSettings) setup() (*agentSetup, error) {
	if s.dataDir == "" {
		return nil, errors.New("-data-dir is required")
	}
	if s.raftMultiplier < 1 || s.raftMultiplier > 10 {
		return nil, fmt.Errorf("-raft-multiplier %d: want 1 to 10", s.raftMultiplier)
	}
	if err := cluster.ValidateLogStore(s.logStore, s.walSegmentSize); err != nil {
		return nil, err
	}
	if err := s.reapBrakes.Validate(); err != nil {
		return nil, err
	}
	if s.probePort < 0 || s.probePort > 65535 || (s.probePort != 0 && s.probePort == s.httpPort) {
		return nil, fmt.Errorf("-probe-port %d: want a free port other than -http-port (0: off)", s.probePort)
	}
	if s.leaseExpiryRate < 1 {
		return nil, fmt.Errorf("-lease-expiry-rate %d: want a positive number", s.leaseExpiryRate)
	}
	hs, err := s.hostServicesConfig()
	if err != nil {
		return nil, err
	}
	ao, err := s.apiConfig()
	if err != nil {
		return nil, err
	}
	tlsc, err := s.tlsConfigurator()
	if err != nil {
		return nil, err
	}
	if err := s.trace.Validate(); err != nil {
		return nil, fmt.Errorf("-trace-endpoint, -trace-sample-rate or OTEL_* variables: %w", err)
	}
	if s.client {
		if err := s.clientOnlyFlags(); err != nil {
			return nil, err
		}
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "plugreg", Level: hclog.LevelFromString(s.logLevel)})
	return &agentSetup{logger: logger, host: hs, api: ao, tlsc: tlsc}, nil
}

// hostServicesConfig checks the host's plugin sources and fills in the
// plugin socket's path and allowed uids.
func (s *agentSettings) hostServicesConfig() (hostServices, error) {
	hs := s.host
	if hs.pluginsDir != "" {
		if err := pluginwatcher.CheckDir(hs.pluginsDir); err != nil {
			return hs, fmt.Errorf("-plugins-dir: %w", err)
		}
	}
	mode, err := pluginwatcher.ParseMode(hs.pluginsDirMode)
	if err != nil {
		return hs, fmt.Errorf("-plugins-dir-mode: %w", err)
	}
	hs.pluginsDirMode = string(mode)
	if hs.pluginGrace <= 0 {
		return hs, fmt.Errorf("-plugin-grace %v: want a positive duration", hs.pluginGrace)
	}
	if s.pluginSockUIDs != "" {
		uids, err := pluginsock.ParseUIDs(s.pluginSockUIDs)
		if err != nil {
			return hs, fmt.Errorf("-plugin-socket-allow-uid: %w", err)
		}
		hs.pluginSocketAllowUIDs = uids
	}
	switch hs.pluginSocket {
	case "off":
		hs.pluginSocket = ""
	case "":
		hs.pluginSocket = filepath.Join(s.dataDir, "plugin.sock")
	}
	return hs, nil
}

// apiConfig checks who may use the HTTP API and its limits.
func (s *agentSettings) apiConfig() (apiOptions, error) {
	if s.aclToken != "" && s.aclEnabled {
		return apiOptions{}, errors.New("-acl-token and -acl-enabled: choose one (-acl-token is the single shared token of a cluster without ACLs; with ACLs, tokens have policies)")
	}
	if s.limits.BodyReadTimeout <= 0 {
		return apiOptions{}, fmt.Errorf("-http-body-read-timeout %v: want a positive duration", s.limits.BodyReadTimeout)
	}
	if s.aclInitialToken != "" {
		switch {
		case !s.aclEnabled:
			return apiOptions{}, errors.New("-acl-initial-management-token bootstraps ACLs: it needs -acl-enabled")
		case s.client:
			return apiOptions{}, fmt.Errorf("-acl-initial-management-token (or $%s) is for servers: a client agent bootstraps nothing", envInitialToken)
		case len(s.aclInitialToken) < 16 || strings.ContainsFunc(s.aclInitialToken, unicode.IsSpace):
			return apiOptions{}, errors.New("-acl-initial-management-token: want at least 16 characters and no white space (a UUID, as plugreg acl bootstrap makes)")
		}
	}
	ao := apiOptions{token: s.aclToken, acl: httpapi.ACLConfig{Enabled: s.aclEnabled}, limits: s.limits}
	switch s.aclPolicy {
	case "allow":
	case "deny":
		ao.acl.DefaultDeny = true
	default:
		return apiOptions{}, fmt.Errorf("-acl-default-policy %q: want allow or deny", s.aclPolicy)
	}
	hosts, err := httpapi.ParseAllowedHosts(s.allowedHosts)
	if err != nil {
		return apiOptions{}, fmt.Errorf("-http-allowed-hosts: %w", err)
	}
	ao.allowedHosts = hosts
	ao.requiredTypes = httpapi.SplitTypes(s.requiredTypes)
	for _, t := range ao.requiredTypes {
		if err := api.ValidateNewIdentifier("type", t); err != nil {
			return apiOptions{}, fmt.Errorf("-required-plugin-types: %w", err)
		}
	}
	return ao, nil
}

// tlsConfigurator loads the certificates when any TLS flag is set; without
// one it is nil, which every user of it takes for no TLS.
func (s *agentSettings) tlsConfigurator() (*tlsutil.Configurator, error) {
	c := s.tls
	if !c.Enabled() && !c.VerifyIncoming && !c.VerifyOutgoing && !c.VerifyServerHostname {
		return nil, nil
	}
	tlsc, err := tlsutil.NewConfigurator(c)
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	return tlsc, nil
}

// startAndRunAgent starts the agent, a server or with -client a client
// agent, and runs it until a signal, a leave request or a failure stops
// it (runUntilStopped).
func startAndRunAgent(s *agentSettings, a *agentSetup) error {
	logger := a.logger
	// Signals are caught before anything starts: a SIGTERM while the
	// agent starts (systemd stopping a unit that just started, a test
	// that is done) waits for the start and then stops it gracefully,
	// instead of killing the process half started.
	sigs := notifySignals()
	defer sigs.stop()
	startDone := sigs.guardStart(logger)
	defer startDone()
	enc, err := openGossipEncryption(s.dataDir, s.encrypt, logger)
	if err != nil {
		return err
	}
	enc.AcceptPlaintext, enc.SendPlaintext = !s.encryptIn, !s.encryptOut
	a.api.keyring = enc.Keyring
	// A large registry keeps its GC headroom at half its live data
	// rather than all of it, and a server's small registry gets 256 MiB
	// of headroom rather than its live heap's few MiB (internal/gctune);
	// GOGC or GOMEMLIMIT in the environment turn this off.
	defer gctune.Start(gctune.Config{SmallHeaps: !s.client}).Stop()
	if s.pprof != "" {
		stopPprof, err := servePprof(s.pprof, logger)
		if err != nil {
			return err
		}
		defer stopPprof()
	}
	leaveCh := make(chan struct{})
	n, err := startAgentNode(s, a, enc, func() { close(leaveCh) })
	if err != nil {
		return namePortInUse(err, s.bind, []portFlag{{"-http-port", s.httpPort}, {"-server-port", s.serverPort}, {"-gossip-port", s.gossipPort}, {"-probe-port", s.probePort}})
	}
	if err := n.startServices(a.host, logger); err != nil {
		n.stop(false)
		return err
	}
	logRunning(logger, s, a, n)
	warnUnprotected(logger, a.api, a.tlsc, enc)
	startDone()
	return runUntilStopped(logger, n, leaveCh, a.tlsc, sigs)
}

// startAgentNode starts the server or the client agent and its HTTP API.
func startAgentNode(s *agentSettings, a *agentSetup, enc gossip.Encryption, onLeave func()) (*node, error) {
	httpAddr := net.JoinHostPort(s.bind, strconv.Itoa(s.httpPort))
	tc := s.trace
	tc.Node, tc.Role, tc.Version = s.nodeID, api.RoleServer, buildinfo.Read().Version
	if s.client {
		tc.Role = api.RoleClient
	}
	tracer, err := otlp.Setup(tc)
	if err != nil {
		return nil, err
	}
	a.api.tracer = tracer
	var n *node
	if s.client {
		cfg := s.clientConfig(a, enc)
		cfg.Tracer = tracer
		n, err = startClientNode(cfg, httpAddr, a.api, a.tlsc, onLeave)
	} else {
		cfg := s.serverConfig(a, enc)
		cfg.Tracer = tracer
		n, err = startNode(cfg, httpAddr, a.api, a.tlsc, onLeave)
	}
	if err != nil {
		tracer.Shutdown(context.Background()) // nothing was traced yet
		return nil, err
	}
	if tracer != nil {
		a.logger.Info("tracing on: spans go over OTLP/HTTP", "endpoint", tc.Endpoint, "sample_rate", tc.SampleRate)
	}
	if s.probePort > 0 {
		if err := n.serveProbe(net.JoinHostPort(s.bind, strconv.Itoa(s.probePort))); err != nil {
			n.stop(false)
			return nil, err
		}
	}
	return n, nil
}

// clientConfig is a client agent's configuration from the settings.
func (s *agentSettings) clientConfig(a *agentSetup, enc gossip.Encryption) agent.Config {
	return agent.Config{NodeID: s.nodeID, DataDir: s.dataDir, BindAddr: s.bind, GossipPort: s.gossipPort,
		Join: s.join, RetryJoin: s.retryJoin, TLS: a.tlsc, ACLToken: s.aclAgentToken, GossipEncryption: enc, Logger: a.logger}
}

// serverConfig is the server's configuration: cluster's defaults, then
// the settings.
func (s *agentSettings) serverConfig(a *agentSetup, enc gossip.Encryption) *cluster.Config {
	cfg := cluster.DefaultConfig()
	cfg.NodeID, cfg.DataDir, cfg.BindAddr = s.nodeID, s.dataDir, s.bind
	cfg.ServerPort, cfg.GossipPort = s.serverPort, s.gossipPort
	cfg.BootstrapExpect, cfg.Join, cfg.RetryJoin = s.expect, s.join, s.retryJoin
	cfg.SnapshotThreshold, cfg.SnapshotInterval, cfg.TrailingLogs = s.snapshotThreshold, s.snapshotInterval, s.trailingLogs
	cfg.StateCheckInterval = s.stateCheckInterval
	cfg.MaxAppendEntries = s.maxAppendEntries
	cfg.NodeReapAfter, cfg.DeadServerCleanup = s.nodeReapAfter, s.deadServerCleanup
	cfg.ReapBrakes = s.reapBrakes
	cfg.LeaseExpiryRate = s.leaseExpiryRate
	cfg.JournalSize = s.journalSize
	mul := time.Duration(s.raftMultiplier)
	// 500 ms per unit: a dead leader is noticed after a random 1-2x the
	// heartbeat timeout, so this is most of a failover's time. The bench's
	// 20-minute stability run (64 writers, then idle) saw no spurious
	// election at this value on a shared 2-core machine (docs/benchmarks.md).
	cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = mul*500*time.Millisecond, mul*500*time.Millisecond, mul*250*time.Millisecond
	if s.heartbeatTimeout > 0 {
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = s.heartbeatTimeout, s.heartbeatTimeout, s.heartbeatTimeout/2
	}
	cfg.ApplyLog = s.applyLog
	if s.commitTimeout > 0 {
		cfg.CommitTimeout = s.commitTimeout
	}
	cfg.NoCommitNotify = !s.commitNotify
	cfg.LogStore = s.logStore
	cfg.WALSegmentSize = s.walSegmentSize
	cfg.TLS = a.tlsc
	cfg.GossipEncryption = enc
	cfg.ACLEnabled, cfg.ACLDefaultDeny = a.api.acl.Enabled, a.api.acl.DefaultDeny
	cfg.ACLInitialManagementToken = s.aclInitialToken
	cfg.Logger = a.logger
	return cfg
}

// logRunning says the agent is up and where it listens; a client agent
// has no server port.
func logRunning(logger hclog.Logger, s *agentSettings, a *agentSetup, n *node) {
	msg := "agent running"
	kv := []interface{}{"node", s.nodeID, "http", n.ln.Addr().String(), "https", a.tlsc.ServesTLS()}
	if n.srv != nil {
		kv = append(kv, "server", n.srv.RaftAddr())
	} else {
		msg = "client agent running"
	}
	kv = append(kv, "gossip", n.gossipAddr(), "plugins_dir", s.host.pluginsDir, "plugins_dir_mode", n.pluginsDirMode(), "plugin_socket", n.pluginSocket())
	logger.Info(msg, kv...)
}

// unprotected says, one line each, what an agent with these settings
// leaves open to whoever reaches its ports (docs/security.md); the server
// port's own line comes from the server (cluster).
func unprotected(ao apiOptions, tlsc *tlsutil.Configurator, enc gossip.Encryption) []string {
	var out []string
	switch {
	case !ao.acl.Enabled && ao.token == "":
		out = append(out, "no ACLs (-acl-enabled) and no -acl-token: whoever reaches the HTTP API may register, deregister, restore a snapshot and make every operator call")
	case !ao.acl.Enabled:
		out = append(out, "no ACLs (-acl-enabled): whoever reaches the HTTP API may read everything; writes need the one shared -acl-token")
	case !ao.acl.DefaultDeny:
		out = append(out, "-acl-default-policy allow: a request without a token may do everything")
	}
	if !tlsc.ServesTLS() {
		out = append(out, "the HTTP API is plain HTTP: tokens (X-Plugreg-Token) and the registry cross the network readable; serve HTTPS (-tls-cert-file)")
	}
	if enc.Keyring == nil {
		out = append(out, "gossip is not encrypted (-encrypt): whoever reaches the gossip port may join the pool and claim to be any node")
	}
	return out
}

func warnUnprotected(logger hclog.Logger, ao apiOptions, tlsc *tlsutil.Configurator, enc gossip.Encryption) {
	for _, w := range unprotected(ao, tlsc, enc) {
		logger.Warn("unprotected: " + w + " (docs/security.md)")
	}
}

// openGossipEncryption opens the agent's gossip keyring: the one in
// dataDir if there is one, else a new one from encrypt ("" and no file:
// plaintext gossip).
func openGossipEncryption(dataDir, encrypt string, logger hclog.Logger) (gossip.Encryption, error) {
	if encrypt != "" { // a bad key is refused before the data dir is made
		if _, err := gossip.ParseKey(encrypt); err != nil {
			return gossip.Encryption{}, fmt.Errorf("-encrypt: %w", err)
		}
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return gossip.Encryption{}, fmt.Errorf("data dir: %w", err)
	}
	kr, ignored, err := gossip.OpenKeyring(filepath.Join(dataDir, gossip.KeyringFileName), encrypt)
	if err != nil {
		return gossip.Encryption{}, err
	}
	if ignored {
		// Consul's rule: the keyring file holds what rotations made of
		// the key; -encrypt only seeds a new data dir.
		logger.Warn("-encrypt differs from the primary key of the gossip keyring in the data dir; the keyring is used", "keyring", filepath.Join(dataDir, gossip.KeyringFileName))
	}
	return gossip.Encryption{Keyring: kr}, nil
}

// runUntilStopped waits for a signal, a leave request or the HTTP server's
// end, and stops the node within its grace. SIGHUP reloads the TLS
// certificates and keys (tlsc may be nil).
func runUntilStopped(logger hclog.Logger, n *node, leaveCh <-chan struct{}, tlsc *tlsutil.Configurator, sigs *signals) error {
	sig, hup := sigs.term, sigs.hup
	for {
		select {
		case <-hup:
			reloadTLS(logger, tlsc)
			continue
		case s := <-sig:
			// An agent keeps its membership across a restart: stop without
			// leaving ('plugreg leave' leaves on purpose).
			logger.Info("shutting down", "signal", s, "within", signalStopGrace)
			return stopWithin(logger, func() error { return n.stop(false) }, n.stage, signalStopGrace, sig)
		case <-leaveCh:
			logger.Info("leaving the cluster", "within", leaveStopGrace)
			return stopWithin(logger, func() error { return n.stop(true) }, n.stage, leaveStopGrace, sig)
		case err := <-n.done:
			stopWithin(logger, func() error { return n.stop(false) }, n.stage, signalStopGrace, sig)
			return fmt.Errorf("http server: %w", err)
		case err := <-n.fatal:
			// The error is the agent's last line; the stop's own log
			// lines come before it.
			stopWithin(logger, func() error { return n.stop(false) }, n.stage, signalStopGrace, sig)
			return err
		}
	}
}

// signals are the agent's stop (SIGINT, SIGTERM) and reload (SIGHUP)
// signals, caught before the agent starts anything (startAndRunAgent).
type signals struct {
	term, hup chan os.Signal
}

func notifySignals() *signals {
	s := &signals{term: make(chan os.Signal, 2), hup: make(chan os.Signal, 1)}
	signal.Notify(s.term, syscall.SIGINT, syscall.SIGTERM)
	signal.Notify(s.hup, syscall.SIGHUP)
	return s
}

// guardStart bounds a stop requested while the agent starts (a large
// snapshot to restore can take a while): the signal is kept for
// runUntilStopped, which stops the agent gracefully once started, unless
// starting takes longer than the stop grace, when the process exits at
// once. done ends the guard; call it when started (or failed to).
func (s *signals) guardStart(logger hclog.Logger) (done func()) {
	started := make(chan struct{})
	var once sync.Once
	go func() {
		select {
		case <-started:
		case sg := <-s.term:
			logger.Info("signal while starting: stopping once started", "signal", sg, "within", signalStopGrace)
			s.term <- sg // runUntilStopped's (the channel holds two)
			select {
			case <-started:
			case <-time.After(signalStopGrace):
				logger.Error("still starting after the stop grace; exiting without a graceful stop", "grace", signalStopGrace)
				os.Exit(1)
			}
		}
	}()
	return func() { once.Do(func() { close(started) }) }
}

func (s *signals) stop() {
	signal.Stop(s.term)
	signal.Stop(s.hup)
}

// reloadTLS re-reads the certificate, key and CA files; a failure keeps
// the ones in use and says so.
func reloadTLS(logger hclog.Logger, tlsc *tlsutil.Configurator) {
	if tlsc == nil {
		logger.Info("SIGHUP: no TLS configured; nothing to reload")
		return
	}
	if err := tlsc.Reload(); err != nil {
		logger.Error("SIGHUP: TLS reload failed; the certificates in use stay", "error", err)
		return
	}
	logger.Info("SIGHUP: TLS certificates reloaded")
}

// clientOnlyFlags refuses, with -client, a server flag set on the command
// line or in -config.
func (s *agentSettings) clientOnlyFlags() error {
	var bad []string
	s.flags.Visit(func(f *flag.Flag) {
		if s.serverFlags.Lookup(f.Name) != nil {
			bad = append(bad, "-"+f.Name)
		}
	})
	if len(bad) > 0 {
		return fmt.Errorf("%s: server flags; a client agent (-client) has no Raft", strings.Join(bad, ", "))
	}
	return nil
}

// applyConfigFile sets every flag named in the JSON file that the command
// line did not set.
func applyConfigFile(fs *flag.FlagSet, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read config: %w", err)
	}
	var kv map[string]interface{}
	if err := json.Unmarshal(b, &kv); err != nil {
		return fmt.Errorf("config %s:%s %w", path, jsonErrorPosition(b, err), err)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, k := range slices.Sorted(maps.Keys(kv)) {
		v := kv[k]
		at := keyPosition(b, k)
		if fs.Lookup(k) == nil || k == "config" {
			msg := fmt.Sprintf("config %s:%s unknown key %q", path, at, k)
			if s := suggest(k, flagNames(fs)); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			return errors.New(msg)
		}
		if set[k] {
			continue
		}
		vals := []interface{}{v}
		if list, ok := v.([]interface{}); ok {
			vals = list
		}
		for _, x := range vals {
			s := fmt.Sprint(x)
			if f, ok := x.(float64); ok {
				s = strconv.FormatFloat(f, 'f', -1, 64)
			}
			if err := fs.Set(k, s); err != nil {
				return fmt.Errorf("config %s:%s %s %q: %s", path, at, k, s, valueHint(fs.Lookup(k), err.Error()))
			}
		}
	}
	return nil
}

// servePprof serves the runtime profiles on their own listener, apart
// from the API, so that profiling is opt-in and never reachable through
// the API's address.
func servePprof(addr string, logger hclog.Logger) (func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on pprof address %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Warn("pprof server stopped", "error", err)
		}
	}()
	logger.Info("serving pprof", "addr", ln.Addr().String())
	return func() { hs.Close() }, nil
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return ""
	}
	return h
}

// portFlag is a port the agent listens on and the flag that sets it.
type portFlag struct {
	flag string
	port int
}

// namePortInUse rewrites a failure to listen on a port another process
// holds as one line naming the port's flag: the listener says only
// "address already in use", and the user's next question is which flag
// moves it (a Consul agent on the same host, a second plugreg).
func namePortInUse(err error, bind string, ports []portFlag) error {
	if !strings.Contains(err.Error(), "address already in use") {
		return err
	}
	for _, p := range ports {
		if p.port != 0 && regexp.MustCompile(`\b`+strconv.Itoa(p.port)+`\b`).MatchString(err.Error()) {
			return fmt.Errorf("port %d on %s is in use by another process: choose another with %s", p.port, bind, p.flag)
		}
	}
	return err
}

// jsonErrorPosition is where in b a JSON decoding error is, as
// "LINE:COLUMN:" for an editor to jump to (empty when the error has no
// offset).
func jsonErrorPosition(b []byte, err error) string {
	var (
		syntax *json.SyntaxError
		typ    *json.UnmarshalTypeError
		off    int64
	)
	switch {
	case errors.As(err, &syntax):
		off = syntax.Offset
	case errors.As(err, &typ):
		off = typ.Offset
	default:
		return ""
	}
	return lineColumn(b, int(min(off, int64(len(b)))))
}

// keyPosition is where key first appears as a JSON string in b, as
// jsonErrorPosition says it.
func keyPosition(b []byte, key string) string {
	q, _ := json.Marshal(key)
	i := bytes.Index(b, q)
	if i < 0 {
		return ""
	}
	return lineColumn(b, i+1)
}

func lineColumn(b []byte, off int) string {
	line := 1 + bytes.Count(b[:off], []byte("\n"))
	col := off - bytes.LastIndexByte(b[:off], '\n')
	return fmt.Sprintf("%d:%d:", line, col)
}
