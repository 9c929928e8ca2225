// Command plugreg is the plugreg server agent, a local dev cluster, and the
// command-line client.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/cluster"
	"github.com/plugreg/plugreg/internal/buildinfo"
)

// A command is a node of the command tree: a leaf runs with the rest of
// the line; any other node picks its child by the next word.
type command struct {
	summary string
	run     func(args []string) error
	sub     map[string]*command
}

func leaf(summary string, run func([]string) error) *command {
	return &command{summary: summary, run: run}
}

// commands is the whole command line: dispatch, help, suggestions and
// completion (completion.go) all read it, so a command is written once.
var commands *command

// The tree is built in init: completion's leaf reads the tree (an
// initialization cycle in a package-level literal).
func init() {
	commands = &command{sub: map[string]*command{
		"agent":      leaf("run an agent: a server, or with -client a host's client agent", runAgent),
		"dev":        leaf("run a local cluster on 127.0.0.1: three servers, and -clients N client agents", runDev),
		"register":   leaf("register or update a plugin instance", runRegister),
		"deregister": leaf("deregister a plugin instance (or -node N: all of a node's)", runDeregister),
		"renew":      leaf("renew the lease of a plugin instance registered with a TTL", runRenew),
		"list":       leaf("list the newest instance of each plugin of a type", runList),
		"get":        leaf("show a plugin's instances, or one instance", runGet),
		"types":      leaf("list plugin types", runTypes),
		"coverage":   leaf("which live nodes have an instance of a type, and which lack one", runCoverage),
		"watch":      leaf("stream registry events, or run a handler per event (watch -- CMD)", runWatch),
		"members":    leaf("list the agents in gossip: servers and client agents", runMembers),
		"peers":      leaf("list the Raft peers", runPeers),
		"leader":     leaf("show the leader's server address", runLeader),
		"leave":      leaf("make the node at -addr leave the cluster gracefully", runLeave),
		"keygen":     leaf("print a new gossip encryption key", runKeygen),
		"keyring":    leaf("list or rotate every agent's gossip keys: -list, -install, -use, -remove", runKeyring),
		"version":    leaf("print this binary's version", runVersion),
		"acl": {summary: "ACL tokens: bootstrap, token create|list|self|delete", sub: map[string]*command{
			"bootstrap": leaf("create the cluster's first (operator) token", runACLBootstrap),
			"token": {summary: "create, list, show or delete tokens", sub: map[string]*command{
				"create": leaf("create a token and print its secret", runACLTokenCreate),
				"list":   leaf("list the tokens (never their secrets)", runACLTokenList),
				"self":   leaf("show the token in -token", runACLTokenSelf),
				"delete": leaf("delete a token by its accessor ID", runACLTokenDelete),
			}},
		}},
		"tls": {summary: "make a dev PKI: tls ca create, tls cert create -server|-client", sub: map[string]*command{
			"ca":   {summary: "the cluster's CA", sub: map[string]*command{"create": leaf("create a CA certificate and key", runTLSCACreate)}},
			"cert": {summary: "agent and client certificates", sub: map[string]*command{"create": leaf("create a certificate signed by the CA", runTLSCertCreate)}},
		}},
		"operator": {summary: "operator raft list-peers|remove-peer|transfer-leader|inspect, operator reap resume", sub: map[string]*command{
			"raft": {summary: "the Raft configuration", sub: map[string]*command{
				"list-peers":      leaf("list the servers of the Raft configuration with their health", runListPeers),
				"remove-peer":     leaf("remove a server that is gone for good", runRemovePeer),
				"transfer-leader": leaf("make the leader hand leadership to another voter", runTransferLeader),
				"inspect":         leaf("show a stopped server's Raft state from its data dir", runRaftInspect),
			}},
			"reap": {summary: "the reaping brakes", sub: map[string]*command{
				"resume": leaf("let the leader reap the failed nodes its guard holds", runReapResume),
			}},
		}},
		"snapshot": {summary: "back up and restore the registry: snapshot save|restore|inspect FILE", sub: map[string]*command{
			"save":    leaf("save a backup of the registry to a file", runSnapshotSave),
			"restore": leaf("replace the registry with a backup", runSnapshotRestore),
			"inspect": leaf("check a backup and show what it holds", runSnapshotInspect),
		}},
		"completion": {summary: "print a shell completion script: completion bash|zsh|fish", sub: map[string]*command{
			"bash": leaf("bash: plugreg completion bash > /etc/bash_completion.d/plugreg", completionLeaf(bashScript)),
			"zsh":  leaf(`zsh: plugreg completion zsh > "${fpath[1]}/_plugreg" (compinit on)`, completionLeaf(zshScript)),
			"fish": leaf("fish: plugreg completion fish > ~/.config/fish/completions/plugreg.fish", completionLeaf(fishScript)),
		}},
	}}
}

// names are the node's subcommands, sorted.
func (c *command) names() []string {
	names := make([]string, 0, len(c.sub))
	for n := range c.sub {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// usage lists the node's subcommands under path ("acl token").
func (c *command) usage(w io.Writer, path string) {
	cmd := strings.TrimSpace("plugreg " + path)
	fmt.Fprintf(w, "Usage: %s <command> [flags] [args]\n\nCommands:\n", cmd)
	width := 0
	for _, n := range c.names() {
		width = max(width, len(n))
	}
	for _, n := range c.names() {
		fmt.Fprintf(w, "  %-*s  %s\n", width, n, c.sub[n].summary)
	}
	fmt.Fprintf(w, "\nRun '%s <command> -h' for a command's flags.\n", cmd)
	if path == "" {
		fmt.Fprintf(w, "Client commands reach the nodes in $PLUGREG_ADDR (comma-separated; default %s);\n"+
			"their flags (-addr, -token, -format, ...) may also stand before the command.\n", client.DefaultAddr)
	}
}

// dispatch walks the tree from c by the words of args and runs the leaf
// it reaches, with the global flags in front of the leaf's own arguments.
func (c *command) dispatch(path string, args, globals []string) error {
	if c.run != nil {
		err := c.run(append(globals, args...))
		var ue *usageError
		if err == nil || errors.Is(err, errHelp) || errors.As(err, &ue) {
			return err
		}
		return fmt.Errorf("%s: %w", path, err)
	}
	if len(args) == 0 {
		if path == "" {
			c.usage(os.Stderr, path)
			return errNoCommand
		}
		return &usageError{cmd: path, msg: "which command? " + strings.Join(c.names(), ", ")}
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 && args[0] == "help" {
			// plugreg help list: the command's own help.
			return c.dispatch(path, append(args[1:], "-h"), nil)
		}
		c.usage(os.Stdout, path)
		return errHelp
	}
	next, ok := c.sub[args[0]]
	if !ok {
		msg := fmt.Sprintf("unknown command %q", args[0])
		if s := suggest(args[0], c.names()); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		}
		return &usageError{cmd: path, msg: msg}
	}
	return next.dispatch(strings.TrimSpace(path+" "+args[0]), args[1:], globals)
}

// errNoCommand is plugreg alone: the usage is printed, and it exits 2.
var errNoCommand = errors.New("no command")

// Exit statuses beyond 0 and 1.
const (
	exitUsage = 2 // a mistake on the command line
	// exitDataErr: the agent's data dir holds a store it cannot read
	// (sysexits.h EX_DATAERR).
	exitDataErr = 65
)

func main() { os.Exit(run(os.Args[1:])) }

// run runs the command line and returns the exit status.
func run(args []string) int {
	if len(args) == 1 && (args[0] == "-v" || args[0] == "--version" || args[0] == "-version") {
		fmt.Println(buildinfo.Read())
		return 0
	}
	globals, rest, err := hoistGlobalFlags(args)
	if err == nil {
		err = commands.dispatch("", rest, globals)
	}
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, errHelp):
		return 0
	case errors.As(err, &ue):
		ue.print(os.Stderr)
		return exitUsage
	case errors.Is(err, errNoCommand):
		return exitUsage
	}
	fmt.Fprintf(os.Stderr, "plugreg %s\n", strings.TrimSpace(err.Error()))
	var damaged *cluster.StoreError
	if errors.As(err, &damaged) {
		// Its own status, so a supervisor can tell "restarting will
		// not help" (dist/plugreg.service: RestartPreventExitStatus).
		return exitDataErr
	}
	return 1
}
