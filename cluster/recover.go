package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/fsm"
	"github.com/plugreg/plugreg/internal/atomicfile"
)

// PeersFileName is the file in a server's data dir that asks for a manual
// recovery of the Raft configuration at the next start: Consul's
// peers.json for Raft protocol 3, a JSON list of
// {"id": NODE-ID, "address": SERVER-ADDRESS, "non_voter": false}, read as
// raft.ReadConfigJSON reads it. The agent applies it with
// raft.RecoverCluster before Raft starts, then removes it
// (docs/operations.md, "Outage recovery").
const PeersFileName = "peers.json"

// peerEntry is one element of peers.json (raft's configEntry).
type peerEntry struct {
	ID       string `json:"id"`
	Address  string `json:"address"`
	NonVoter bool   `json:"non_voter"`
}

// parsePeersJSON reads a peers.json strictly: raft.ReadConfigJSON takes
// whatever decodes (unknown keys, trailing data, an address that is no
// address, an ID no node could have), and a typo in a file that rewrites
// the cluster's membership must be the operator's to fix, not a surprise
// after the start. The configuration it returns is what
// raft.ReadConfigJSON makes of the same bytes.
func parsePeersJSON(b []byte) (raft.Configuration, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var peers []peerEntry
	if err := dec.Decode(&peers); err != nil {
		return raft.Configuration{}, fmt.Errorf("not a JSON list of {\"id\", \"address\", \"non_voter\"}: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return raft.Configuration{}, errors.New("data after the JSON list")
	}
	if len(peers) == 0 {
		return raft.Configuration{}, errors.New("the list is empty: name at least this server")
	}
	var conf raft.Configuration
	ids, addrs := map[string]bool{}, map[string]bool{}
	voters := 0
	for i, p := range peers {
		n := i + 1
		if p.ID == "" {
			return raft.Configuration{}, fmt.Errorf("entry %d has no \"id\"", n)
		}
		if err := api.ValidateIdentifier("id", p.ID); err != nil {
			return raft.Configuration{}, fmt.Errorf("entry %d: %q cannot be a node ID: %w", n, p.ID, err)
		}
		if p.Address == "" {
			return raft.Configuration{}, fmt.Errorf("entry %d (%s) has no \"address\"", n, p.ID)
		}
		addr, err := canonicalServerAddr(p.Address)
		if err != nil {
			return raft.Configuration{}, fmt.Errorf("entry %d (%s): address %q: %w", n, p.ID, p.Address, err)
		}
		if ids[p.ID] {
			return raft.Configuration{}, fmt.Errorf("id %q is listed twice", p.ID)
		}
		if addrs[addr] {
			return raft.Configuration{}, fmt.Errorf("address %s is listed twice", addr)
		}
		ids[p.ID], addrs[addr] = true, true
		suffrage := raft.Voter
		if p.NonVoter {
			suffrage = raft.Nonvoter
		} else {
			voters++
		}
		conf.Servers = append(conf.Servers, raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(addr), Suffrage: suffrage})
	}
	if voters == 0 {
		return raft.Configuration{}, errors.New("every entry is a non-voter: a cluster needs a voter")
	}
	return conf, nil
}

// canonicalServerAddr checks that addr is a server address as servers
// advertise theirs (list-peers, members): an IP and a port, since -bind is
// an IP. It returns the address in canonical form, so that duplicates and
// this server's own address compare as the same string.
func canonicalServerAddr(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("want IP:PORT: %w", err)
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return "", fmt.Errorf("%q is not an IP address (servers advertise the IP of -bind)", host)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return "", fmt.Errorf("port %q is not a port number", port)
	}
	return net.JoinHostPort(ip.String(), strconv.FormatUint(p, 10)), nil
}

// peersRecovery is a validated peers.json waiting to be applied.
type peersRecovery struct {
	path string
	conf raft.Configuration
}

// loadPeersFile reads and checks the data dir's peers.json, if there is
// one, against this server: it must name this server's node ID at the
// address this server listens on, and the data dir must hold a Raft log
// to recover. It reads only: a refusal leaves the data dir, the file
// included, as it was. Called before the stores are opened.
func (s *Server) loadPeersFile() (*peersRecovery, bool, error) {
	path := filepath.Join(s.cfg.DataDir, PeersFileName)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s; nothing in the data dir was changed and the file was kept: fix it, or remove it to start without a recovery (docs/operations.md, Outage recovery)",
			ErrPeersJSON, path, fmt.Sprintf(format, args...))
	}
	if err != nil {
		return nil, false, refuse("cannot read it: %v", err)
	}
	conf, err := parsePeersJSON(b)
	if err != nil {
		return nil, false, refuse("%v", err)
	}
	own, err := canonicalServerAddr(s.raftAddr)
	if err != nil { // ours: cannot happen with an IP bind address
		return nil, false, refuse("this server's own address %q: %v", s.raftAddr, err)
	}
	var self *raft.Server
	for i := range conf.Servers {
		if string(conf.Servers[i].ID) == s.cfg.NodeID {
			self = &conf.Servers[i]
		}
	}
	switch {
	case self == nil:
		return nil, false, refuse("the list does not name this server's node ID %q (a recovered server must be in its own configuration)", s.cfg.NodeID)
	case string(self.Address) != own:
		return nil, false, refuse("it gives %s the address %s, but this server listens on %s", s.cfg.NodeID, self.Address, own)
	}
	if storeInDir(s.cfg.DataDir) == "" {
		return nil, false, refuse("the data dir holds no Raft log to recover: put peers.json in the data dir of a server that kept its data (the one with the most advanced log: plugreg operator raft inspect)")
	}
	return &peersRecovery{path: path, conf: conf}, true, nil
}

// recoverCluster applies peers.json: raft.RecoverCluster restores the
// newest snapshot and applies every entry of the log after it, committed
// or not, into a snapshot that carries the file's configuration, and
// empties the log. Then the file is removed (and the removal synced): left
// in place, the next restart would throw away every membership change made
// since, the servers added after the recovery included. Call it before
// raft.NewRaft, with the stores Raft will use.
func (s *Server) recoverCluster(rc *raft.Config, logs raft.LogStore, snaps raft.SnapshotStore, rec *peersRecovery) error {
	s.logger.Warn("peers.json found: recovering the Raft configuration (manual outage recovery); every entry in this server's log, committed or not, becomes committed",
		"file", rec.path, "servers", serverList(rec.conf))
	// A throwaway FSM: RecoverCluster restores into it and applies to it
	// only to write the new snapshot, and NewRaft restores the server's
	// own FSM from that snapshot. (raft's own note: the FSM passed is not
	// the one a running server uses.)
	if err := raft.RecoverCluster(rc, fsm.New(nil), logs, s.stable, snaps, s.trans, rec.conf); err != nil {
		return fmt.Errorf("%w: %s: raft recovery failed: %v; the file was kept: fix the cause and start again", ErrPeersJSON, rec.path, err)
	}
	var index, term uint64
	if metas, err := snaps.List(); err == nil && len(metas) > 0 {
		index, term = metas[0].Index, metas[0].Term
	}
	if err := removeSynced(rec.path); err != nil {
		return fmt.Errorf("%w: the Raft configuration was recovered, but %v: remove %s by hand before the next start (left in place, it would undo every membership change made after this one)",
			ErrPeersJSON, err, rec.path)
	}
	s.logger.Warn("RECOVERED the Raft configuration from peers.json and removed the file: the log up to the last index is now a snapshot with this configuration; start (or add) the other servers now",
		"last_index", index, "last_term", term, "servers", serverList(rec.conf), "removed", rec.path)
	return nil
}

// removeSynced removes path and syncs its directory, so that the removal
// survives a power cut.
func removeSynced(path string) error {
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove: %w", err)
	}
	return atomicfile.SyncDir(filepath.Dir(path))
}

// serverList is a configuration for a log line: id=address (non-voter).
func serverList(conf raft.Configuration) string {
	var out []string
	for _, srv := range conf.Servers {
		e := string(srv.ID) + "=" + string(srv.Address)
		if srv.Suffrage != raft.Voter {
			e += " (non-voter)"
		}
		out = append(out, e)
	}
	return strings.Join(out, ", ")
}
