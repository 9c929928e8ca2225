package main

import (
	"flag"
	"fmt"
	"strconv"

	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/cluster"
)

// runRaftInspect prints the Raft state of a stopped server's data dir:
// offline, for picking the survivor to recover a lost quorum from.
func runRaftInspect(args []string) error {
	fs := flag.NewFlagSet("operator raft inspect", flag.ContinueOnError)
	dir := fs.String("data-dir", "", "the data dir of a stopped server (required)")
	var out output
	out.define(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: plugreg operator raft inspect -data-dir DIR\n\n"+
			"Reads a stopped server's data dir (no agent needed, none may hold it) and prints its\n"+
			"last log index and term, its newest snapshot and its Raft configuration. After a lost\n"+
			"quorum, run it on every surviving server and recover from the one with the highest\n"+
			"LAST TERM, then the highest LAST INDEX (docs/operations.md, Outage recovery).\n\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := out.check(fs); err != nil {
		return err
	}
	if *dir == "" || fs.NArg() > 0 {
		return usageErrorf(fs, "want -data-dir DIR and no arguments")
	}
	st, err := cluster.InspectDataDir(*dir)
	if err != nil {
		return err
	}
	if out.structured() {
		return out.print(st, nil)
	}
	fmt.Printf("Data dir:        %s\n", st.DataDir)
	fmt.Printf("Node ID:         %s\n", orDash(st.NodeID))
	fmt.Printf("Log store:       %s\n", st.LogStore)
	fmt.Printf("Current term:    %d\n", st.CurrentTerm)
	if st.LastLogIndex == 0 {
		fmt.Printf("Log:             empty\n")
	} else {
		fmt.Printf("Log:             %d to %d (last term %d)\n", st.FirstLogIndex, st.LastLogIndex, st.LastLogTerm)
	}
	if st.Snapshot == nil {
		fmt.Printf("Last snapshot:   none\n")
	} else {
		fmt.Printf("Last snapshot:   index %d, term %d (%s, %d bytes)\n", st.Snapshot.Index, st.Snapshot.Term, st.Snapshot.ID, st.Snapshot.Size)
	}
	fmt.Printf("Last index:      %d\n", st.LastIndex)
	fmt.Printf("Last term:       %d\n", st.LastTerm)
	if st.PeersJSON {
		fmt.Printf("peers.json:      present: the next start recovers with it\n")
	}
	fmt.Printf("\nRaft configuration (index %d, from the %s):\n", st.ConfigurationIndex, orDash(st.ConfigurationFrom))
	return out.print(st, func() table {
		t := table{header: "NODE\tADDRESS\tVOTER"}
		for _, s := range st.Configuration {
			t.rows = append(t.rows, []string{string(s.ID), string(s.Address), strconv.FormatBool(s.Suffrage == raft.Voter)})
		}
		return t
	})
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
