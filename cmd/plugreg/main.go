// Command plugreg is the plugreg server agent, a local dev cluster, and the
// command-line client.
package main

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/plugreg/plugreg/cluster"
	"github.com/plugreg/plugreg/internal/buildinfo"
)

type command struct {
	summary string
	run     func(args []string) error
}

var commands = map[string]command{
	"agent":      {"run an agent: a server, or with -client a host's client agent", runAgent},
	"dev":        {"run a local cluster on 127.0.0.1: three servers, and -clients N client agents", runDev},
	"register":   {"register or update a plugin instance", runRegister},
	"deregister": {"deregister a plugin instance (or -node N: all of a node's)", runDeregister},
	"renew":      {"renew the lease of a plugin instance registered with a TTL", runRenew},
	"list":       {"list the newest instance of each plugin of a type", runList},
	"get":        {"show a plugin's instances, or one instance", runGet},
	"types":      {"list plugin types", runTypes},
	"coverage":   {"which live nodes have an instance of a type, and which lack one", runCoverage},
	"watch":      {"stream registry events", runWatch},
	"members":    {"list the cluster's servers and client agents", runMembers},
	"peers":      {"list the Raft peers", runPeers},
	"leader":     {"show the leader's server address", runLeader},
	"leave":      {"make the node at -addr leave the cluster gracefully", runLeave},
	"acl":        {"ACL tokens: acl bootstrap, acl token create|list|self|delete", runACL},
	"tls":        {"make a dev PKI: tls ca create, tls cert create -server|-client", runTLS},
	"keygen":     {"print a new gossip encryption key", runKeygen},
	"keyring":    {"list or rotate every agent's gossip keys: -list, -install, -use, -remove", runKeyring},
	"version":    {"print this binary's version", runVersion},
	"operator":   {"operator raft list-peers|remove-peer ID|transfer-leader|inspect -data-dir DIR, operator reap resume", runOperator},
	"snapshot":   {"back up and restore the registry: snapshot save|restore|inspect FILE", runSnapshot},
}

func usage() {
	fmt.Fprintf(os.Stderr, "Usage: plugreg <command> [flags] [args]\n\nCommands:\n")
	var names []string
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-11s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(os.Stderr, "\nRun 'plugreg <command> -h' for a command's flags.\n"+
		"Client commands reach the nodes in $PLUGREG_ADDR (comma-separated; default 127.0.0.1:7700).\n")
}

// exitDataErr is the agent's exit status when its data dir holds a store
// it cannot read (sysexits.h EX_DATAERR).
const exitDataErr = 65

func main() {
	if len(os.Args) == 2 && (os.Args[1] == "-v" || os.Args[1] == "--version" || os.Args[1] == "-version") {
		fmt.Println(buildinfo.Read())
		return
	}
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		usage()
		if len(os.Args) < 2 {
			os.Exit(2)
		}
		return
	}
	cmd, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "plugreg: unknown command %q\n\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	if err := cmd.run(os.Args[2:]); err != nil {
		if err == errUsage {
			os.Exit(2)
		}
		fmt.Fprintf(os.Stderr, "plugreg %s: %s\n", os.Args[1], strings.TrimSpace(err.Error()))
		var damaged *cluster.StoreError
		if errors.As(err, &damaged) {
			// Its own status, so a supervisor can tell "restarting will
			// not help" (dist/plugreg.service: RestartPreventExitStatus).
			os.Exit(exitDataErr)
		}
		os.Exit(1)
	}
}
