package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
)

func runListPeers(args []string) error {
	cf := newClientFlags("operator raft list-peers", "", "Lists the servers of the Raft configuration with their health, as autopilot judges it:\nin gossip, heard from the leader within the heartbeat timeout, in its term, at most\n250 entries behind its log, and able to take the leader's log (its state not ahead of\nit, the leader's snapshots not refused); REASON says why not. Exits 1 when a server is\nunhealthy.")
	return cf.withClient(args, []int{0}, func(ctx context.Context, c *client.Client) error {
		h, err := c.AutopilotHealth(ctx)
		if err != nil {
			return err
		}
		err = cf.out.print(h, func() table {
			t := table{header: "NODE\tADDRESS\tSTATE\tVOTER\tHEALTHY\tGOSSIP\tLAST CONTACT\tLAST INDEX\tLAG\tREASON"}
			for _, s := range h.Servers {
				state := "follower"
				if s.Leader {
					state = "leader"
				}
				lc := s.LastContact
				if lc == "" {
					lc = "-"
				}
				t.rows = append(t.rows, []string{s.ID, s.Address, state, strconv.FormatBool(s.Voter), strconv.FormatBool(s.Healthy), s.SerfStatus, lc,
					strconv.FormatUint(s.LastIndex, 10), strconv.FormatUint(s.IndexLag, 10), s.Reason})
			}
			return t
		})
		if err != nil {
			return err
		}
		cf.out.summary("healthy: %v, failure tolerance: %d", h.Healthy, h.FailureTolerance)
		if !h.Healthy {
			return errors.New("a server is unhealthy")
		}
		return nil
	})
}

// leaderClient returns a client of the leader's HTTP address, found in
// the members ms (as the answering agent lists them): peer removal and
// leadership transfer are the leader's to do.
func (cf *clientFlags) leaderClient(ms []api.Member) (*client.Client, string, error) {
	for _, m := range ms {
		if m.Leader && m.HTTPAddr != "" {
			lc, err := cf.clientAt(m.HTTPAddr)
			return lc, m.Name, err
		}
	}
	return nil, "", errors.New("no leader known to the answering agent; try again, or ask another (-addr)")
}

func runRemovePeer(args []string) error {
	cf := newClientFlags("operator raft remove-peer", "ID", "Removes the server ID from the Raft configuration (through the leader): for a server\nthat is gone for good. A running server should leave instead (plugreg leave).")
	return cf.withClient(args, []int{1}, func(ctx context.Context, c *client.Client) error {
		id := cf.args[0]
		ms, err := c.Members(ctx)
		if err != nil {
			return err
		}
		for _, m := range ms {
			if m.Name == id && m.Status == "alive" {
				// The leader's reconciliation adds alive servers back.
				return fmt.Errorf("%s is alive in gossip: the leader would add it back; stop it first (or run plugreg leave against it), then wait until plugreg members shows it failed", id)
			}
		}
		lc, _, err := cf.leaderClient(ms)
		if err != nil {
			return err
		}
		if err := lc.RemovePeer(ctx, id); err != nil {
			return err
		}
		fmt.Printf("removed %s from the Raft configuration\n", id)
		return nil
	})
}

func runTransferLeader(args []string) error {
	cf := newClientFlags("operator raft transfer-leader", "", "Makes the leader hand leadership to another voter (before restarting it, say).")
	return cf.withClient(args, []int{0}, func(ctx context.Context, c *client.Client) error {
		ms, err := c.Members(ctx)
		if err != nil {
			return err
		}
		lc, from, err := cf.leaderClient(ms)
		if err != nil {
			return err
		}
		to, err := lc.TransferLeadership(ctx)
		if err != nil {
			return err
		}
		fmt.Printf("leadership moved from %s to %s\n", from, to)
		return nil
	})
}

func runReapResume(args []string) error {
	cf := newClientFlags("operator reap resume", "", "Lets the leader reap the failed nodes its guard holds (more client agents failed at once\nthan -node-reap-pause-above allows), at -node-reap-rate, until the guard releases: for\nwhen those agents are known to be gone for good. The next mass failure holds again.")
	return cf.withClient(args, []int{0}, func(ctx context.Context, c *client.Client) error {
		ms, err := c.Members(ctx)
		if err != nil {
			return err
		}
		lc, leader, err := cf.leaderClient(ms)
		if err != nil {
			return err
		}
		st, err := lc.ResumeReaping(ctx)
		if err != nil {
			return err
		}
		if cf.out.structured() {
			return cf.out.print(st, nil)
		}
		counts := fmt.Sprintf("%d of %d client agents failed; the guard holds above %g, with at least %d failed", st.FailedClients, st.Clients, st.PauseAbove, st.PauseMinFailed)
		if !st.Resumed {
			fmt.Printf("reaping was not paused on %s (%s): nothing changed\n", leader, counts)
			return nil
		}
		fmt.Printf("reaping resumed on %s (%s): the failed nodes are reaped at -node-reap-rate until the guard releases\n", leader, counts)
		return nil
	})
}
