package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/gossip"
)

func runKeygen(args []string) error {
	fs := flag.NewFlagSet("keygen", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: plugreg keygen\n\nPrints a new gossip encryption key (32 random bytes, base64) for -encrypt and plugreg keyring.")
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf(fs, "takes no arguments")
	}
	k, err := gossip.GenerateKey()
	if err != nil {
		return err
	}
	fmt.Println(k)
	return nil
}

// runKeyring acts on every member's gossip keyring in turn: keys are per
// agent (each keeps its keyring in its data dir), so a rotation is
// install everywhere, use everywhere, remove everywhere. -use and -remove
// first check that the step is safe on every live agent: a key made
// primary where another agent lacks it, or removed while one still
// encrypts with it, would cut that agent off.
func runKeyring(args []string) error {
	cf := newClientFlags("keyring", "", "Lists or changes the gossip encryption keys of every live agent (the members the\nanswering node lists). Exactly one of -list, -install, -use, -remove.\nRotation without downtime: -install NEW, then -use NEW, then -remove OLD.")
	list := cf.fs.Bool("list", false, "list the keys and how many agents hold each")
	install := cf.fs.String("install", "", "install this key on every agent (it decrypts at once)")
	use := cf.fs.String("use", "", "make this installed key every agent's primary (encrypting) key")
	remove := cf.fs.String("remove", "", "remove this key, primary nowhere, from every agent")
	return cf.withClient(args, []int{0}, func(ctx context.Context, c *client.Client) error {
		var op, key string
		n := 0
		for _, o := range []struct{ name, key string }{{"install", *install}, {"use", *use}, {"remove", *remove}} {
			if o.key != "" {
				op, key = o.name, o.key
				n++
			}
		}
		if *list {
			op = "list"
			n++
		}
		if n != 1 {
			return usageErrorf(cf.fs, "want exactly one of -list, -install, -use, -remove")
		}
		if op != "list" {
			if _, err := gossip.ParseKey(key); err != nil {
				return err
			}
		}
		agents, err := cf.memberClients(ctx, c)
		if err != nil {
			return err
		}
		statuses, err := keyringList(ctx, agents)
		if op == "list" {
			if perr := cf.out.print(statuses, keyringTable(statuses, len(agents))); perr != nil {
				return perr
			}
			return err
		}
		if err != nil {
			return fmt.Errorf("%w; nothing changed", err)
		}
		if err := checkKeyringStep(op, key, statuses); err != nil {
			return err
		}
		var failed []string
		for _, a := range agents {
			var err error
			switch op {
			case "install":
				_, err = a.c.KeyringInstall(ctx, key)
			case "use":
				_, err = a.c.KeyringUse(ctx, key)
			case "remove":
				_, err = a.c.KeyringRemove(ctx, key)
			}
			if err != nil {
				failed = append(failed, fmt.Sprintf("%s: %v", a.name, err))
			}
		}
		fmt.Printf("%s: done on %d/%d agents\n", op, len(agents)-len(failed), len(agents))
		if len(failed) > 0 {
			return fmt.Errorf("%s failed on %s; run it again once they answer", op, strings.Join(failed, "; "))
		}
		return nil
	})
}

// memberAgent is one live member and a client that talks to it alone.
type memberAgent struct {
	name string
	c    *client.Client
}

// memberClients lists the live members (as the answering node knows them)
// with a client for each, carrying the command's TLS settings and token.
// A member that is not alive is an error: a key change it misses would
// keep it out when it comes back.
func (cf *clientFlags) memberClients(ctx context.Context, c *client.Client) ([]memberAgent, error) {
	ms, err := c.Members(ctx)
	if err != nil {
		return nil, err
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Name < ms[j].Name })
	var out []memberAgent
	var down []string
	for _, m := range ms {
		switch m.Status {
		case "left":
			continue
		case "alive":
		default:
			down = append(down, m.Name+" ("+m.Status+")")
			continue
		}
		mc, err := cf.clientAt(m.HTTPAddr)
		if err != nil {
			return nil, fmt.Errorf("member %s: %w", m.Name, err)
		}
		out = append(out, memberAgent{name: m.Name, c: mc})
	}
	if len(down) > 0 {
		return nil, fmt.Errorf("members not alive: %s; bring them back or remove them (plugreg leave, or wait for reaping) before changing keys", strings.Join(down, ", "))
	}
	return out, nil
}

// keyringList asks every agent for its keys; the statuses it got come back
// with an error naming the agents that did not answer.
func keyringList(ctx context.Context, agents []memberAgent) ([]api.KeyringStatus, error) {
	var out []api.KeyringStatus
	var failed []string
	for _, a := range agents {
		st, err := a.c.Keyring(ctx)
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", a.name, err))
			continue
		}
		st.Node = a.name
		out = append(out, st)
	}
	if len(failed) > 0 {
		return out, fmt.Errorf("keyring of %s", strings.Join(failed, "; "))
	}
	return out, nil
}

// checkKeyringStep refuses a -use of a key some agent lacks, and a
// -remove of a key some agent still encrypts with.
func checkKeyringStep(op, key string, statuses []api.KeyringStatus) error {
	for _, st := range statuses {
		switch op {
		case "use":
			if !slices.Contains(st.Keys, key) {
				return fmt.Errorf("use: %s does not have the key; install it everywhere first (plugreg keyring -install); nothing changed", st.Node)
			}
		case "remove":
			if st.PrimaryKey == key {
				return fmt.Errorf("remove: the key is %s's primary key; use another everywhere first (plugreg keyring -use); nothing changed", st.Node)
			}
		}
	}
	return nil
}

func keyringTable(statuses []api.KeyringStatus, agents int) func() table {
	return func() table { return keyringRows(statuses, agents) }
}

func keyringRows(statuses []api.KeyringStatus, agents int) table {
	held := map[string]int{}
	primary := map[string]int{}
	var keys []string
	for _, st := range statuses {
		for _, k := range st.Keys {
			if held[k] == 0 {
				keys = append(keys, k)
			}
			held[k]++
		}
		primary[st.PrimaryKey]++
	}
	t := table{header: "KEY\tINSTALLED\tPRIMARY ON"}
	for _, k := range keys {
		t.rows = append(t.rows, []string{k, strconv.Itoa(held[k]) + "/" + strconv.Itoa(agents), strconv.Itoa(primary[k])})
	}
	return t
}
