package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
)

func runACLBootstrap(args []string) error {
	cf := newClientFlags("acl bootstrap", "", "Creates the cluster's first ACL token, an operator token, and prints its secret.\nIt works once per cluster; keep the secret (PLUGREG_TOKEN) safe.")
	return cf.withClient(args, []int{0}, func(ctx context.Context, c *client.Client) error {
		t, err := c.ACLBootstrap(ctx)
		if err != nil {
			return err
		}
		return printToken(cf, t)
	})
}

// parsePolicy reads "read", "write", "operator", or "read:TYPES" and
// "write:TYPES" with TYPES comma-separated names or prefixes ("csi-*").
func parsePolicy(s string) (api.ACLPolicy, error) {
	kind, types, _ := strings.Cut(s, ":")
	p := api.ACLPolicy{Kind: api.ACLPolicyKind(kind)}
	if types != "" {
		p.Types = strings.Split(types, ",")
	}
	if err := api.ValidatePolicies([]api.ACLPolicy{p}); err != nil {
		return p, fmt.Errorf("-policy %q: %w", s, err)
	}
	return p, nil
}

func runACLTokenCreate(args []string) error {
	cf := newClientFlags("acl token create", "", "Creates an ACL token and prints its secret (shown only here). Needs an operator token.\nPolicies: read, write, operator; read and write take types: write:csi-*,device.")
	var specs listFlag
	cf.fs.Var(&specs, "policy", "a policy: read[:TYPES], write[:TYPES] or operator (repeatable)")
	desc := cf.fs.String("description", "", "what the token is for")
	node := cf.fs.String("node", "", "bind the token to this node: a client agent's -acl-agent-token, which may register and deregister only that node's plugins")
	return cf.withClient(args, []int{0}, func(ctx context.Context, c *client.Client) error {
		if len(specs) == 0 {
			return errors.New("at least one -policy is required")
		}
		var ps []api.ACLPolicy
		for _, s := range specs {
			p, err := parsePolicy(s)
			if err != nil {
				return err
			}
			ps = append(ps, p)
		}
		create := c.ACLTokenCreate
		if *node != "" {
			create = func(ctx context.Context, desc string, ps []api.ACLPolicy) (api.ACLTokenSecret, error) {
				return c.ACLAgentTokenCreate(ctx, *node, desc, ps)
			}
		}
		t, err := create(ctx, *desc, ps)
		if err != nil {
			return err
		}
		return printToken(cf, t)
	})
}

func runACLTokenList(args []string) error {
	cf := newClientFlags("acl token list", "", "Lists the ACL tokens (never their secrets). Needs an operator token.")
	return cf.withClient(args, []int{0}, func(ctx context.Context, c *client.Client) error {
		ts, err := c.ACLTokens(ctx)
		if err != nil {
			return err
		}
		return cf.out.print(ts, func() table {
			tb := table{header: "ACCESSOR\tPOLICIES\tNODE\tDESCRIPTION\tCREATED"}
			for _, t := range ts {
				tb.rows = append(tb.rows, []string{t.AccessorID, policiesString(t.Policies), orDash(t.Node), t.Description, strconv.FormatUint(t.CreateIndex, 10)})
			}
			return tb
		})
	})
}

func runACLTokenSelf(args []string) error {
	cf := newClientFlags("acl token self", "", "Shows the token in -token / PLUGREG_TOKEN.")
	return cf.withClient(args, []int{0}, func(ctx context.Context, c *client.Client) error {
		t, err := c.ACLTokenSelf(ctx)
		if err != nil {
			return err
		}
		return printToken(cf, api.ACLTokenSecret{ACLToken: t})
	})
}

func runACLTokenDelete(args []string) error {
	cf := newClientFlags("acl token delete", "ACCESSOR", "Deletes an ACL token by its accessor ID. Needs an operator token.")
	return cf.withClient(args, []int{1}, func(ctx context.Context, c *client.Client) error {
		res, err := c.ACLTokenDelete(ctx, cf.args[0])
		if err != nil {
			return err
		}
		return cf.out.print(res, writeLine(res, "token "+cf.args[0]))
	})
}

func policiesString(ps []api.ACLPolicy) string {
	var out []string
	for _, p := range ps {
		s := string(p.Kind)
		if len(p.Types) > 0 {
			s += ":" + strings.Join(p.Types, ",")
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

func printToken(cf *clientFlags, t api.ACLTokenSecret) error {
	if cf.out.structured() {
		return cf.out.print(t, nil)
	}
	fmt.Printf("AccessorID:  %s\n", t.AccessorID)
	if t.SecretID != "" {
		fmt.Printf("SecretID:    %s\n", t.SecretID)
	}
	fmt.Printf("Policies:    %s\nDescription: %s\nCreateIndex: %d\n", policiesString(t.Policies), t.Description, t.CreateIndex)
	if t.Node != "" {
		fmt.Printf("Node:        %s\n", t.Node)
	}
	return nil
}
