package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
)

// runRenew renews one lease once: what a holder that renews by itself
// (cron, a script's loop) runs within every TTL.
func runRenew(args []string) error {
	cf := newClientFlags("renew", "TYPE NAME ALLOC", "Renews the lease of a plugin instance registered with a TTL: it now expires\na TTL from now unless renewed again. Fails (404) when there is no such lease:\nthe instance expired, was deregistered, or has no TTL.")
	return cf.withClient(args, []int{3}, func(ctx context.Context, c *client.Client) error {
		a := cf.args
		res, err := c.Renew(ctx, a[0], a[1], a[2])
		if err != nil {
			return err
		}
		return cf.out.print(res, lines([]string{fmt.Sprintf("renewed %s: its lease runs %s from now", strings.Join(a, "/"), res.TTL)}))
	})
}

// holdLease is register -renew: it keeps the lease of info's registration
// (res) in the foreground, a third of the TTL at a time, through node
// failures and elections; a lease lost all the same (the cluster could not
// be reached for a whole TTL) is registered again. On SIGINT or SIGTERM it
// deregisters the instance, unless it was registered again by someone
// else since (the deregistration is conditional on the index this holder
// registered it at). timeout bounds each write, not the hold.
func holdLease(c *client.Client, info *api.PluginInfo, res api.WriteResult, timeout time.Duration) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	what := info.Type + "/" + info.Name + "/" + info.AllocID
	at, err := registeredAt(ctx, c, info, res, timeout)
	if err != nil {
		return err
	}
	fmt.Printf("renewing the lease of %s every %s until Ctrl-C\n", what, (time.Duration(info.TTL) / 3).Round(time.Millisecond))
	for {
		err := c.KeepAlive(ctx, info.Type, info.Name, info.AllocID, 0)
		if ctx.Err() != nil {
			break
		}
		if !errors.Is(err, api.ErrNotFound) {
			return err
		}
		fmt.Fprintf(os.Stderr, "plugreg register: the lease of %s was lost (%v); registering it again\n", what, err)
		wctx, cancel := context.WithTimeout(ctx, timeout)
		res, err := c.Register(wctx, info)
		if err == nil {
			at, err = registeredAt(wctx, c, info, res, timeout)
		}
		cancel()
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			return err
		}
		fmt.Printf("%s %s at index %d\n", res.Result, what, res.Index)
	}
	stop() // a second Ctrl-C ends the process at once
	dctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	dres, err := c.DeregisterIf(dctx, api.DeregisterRequest{Type: info.Type, Name: info.Name, AllocID: info.AllocID, IfModifyIndex: at})
	switch {
	case errors.Is(err, api.ErrConflict):
		fmt.Printf("left %s in place: it was registered again since\n", what)
		return nil
	case err != nil:
		return fmt.Errorf("deregister %s: %w", what, err)
	}
	fmt.Printf("%s %s at index %d\n", dres.Result, what, dres.Index)
	return nil
}

// registeredAt is the ModifyIndex of the registration res made: its own
// index, or the instance's when it changed nothing.
func registeredAt(ctx context.Context, c *client.Client, info *api.PluginInfo, res api.WriteResult, timeout time.Duration) (uint64, error) {
	if res.Result != api.ResultUnchanged {
		return res.Index, nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	p, _, err := c.Get(ctx, info.Type, info.Name, info.AllocID, nil)
	if err != nil {
		return 0, fmt.Errorf("read back %s/%s/%s: %w", info.Type, info.Name, info.AllocID, err)
	}
	return p.ModifyIndex, nil
}
