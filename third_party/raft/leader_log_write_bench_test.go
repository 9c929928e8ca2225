// Copyright (c) HashiCorp, Inc.
// SPDX-License-Identifier: MPL-2.0

package raft

import (
	"fmt"
	"testing"
	"time"
)

// slowLogStore makes every write take delay, as an fsync does: each
// server its own disk.
type slowLogStore struct {
	LogStore
	delay time.Duration
}

func (s slowLogStore) StoreLog(l *Log) error { return s.StoreLogs([]*Log{l}) }

func (s slowLogStore) StoreLogs(logs []*Log) error {
	time.Sleep(s.delay)
	return s.LogStore.StoreLogs(logs)
}

// One writer's Apply latency on three servers, each writing its log with a
// given delay (an fsync on a disk of its own), the leader writing before it
// replicates (parallel=false, v1.7.3) or while it does (parallel=true).
// With an in-memory transport the round trip is near zero, so a write costs
// about two log writes serially and one in parallel.
func BenchmarkLeaderLogWrite(b *testing.B) {
	for _, delay := range []time.Duration{0, 500 * time.Microsecond, 2 * time.Millisecond} {
		for _, parallel := range []bool{false, true} {
			b.Run(fmt.Sprintf("fsync=%v/parallel=%v", delay, parallel), func(b *testing.B) {
				leader := startSlowCluster(b, 3, delay, parallel)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if err := leader.Apply([]byte("x"), 5*time.Second).Error(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// startSlowCluster starts n servers on in-memory transports with
// slowLogStores, bootstraps them and returns the leader; the servers are
// shut down when b ends.
func startSlowCluster(b *testing.B, n int, delay time.Duration, parallel bool) *Raft {
	b.Helper()
	var (
		trans   []*InmemTransport
		servers []Server
		rafts   []*Raft
	)
	for i := 0; i < n; i++ {
		addr, tr := NewInmemTransport(ServerAddress(fmt.Sprintf("s%d", i)))
		trans = append(trans, tr)
		servers = append(servers, Server{ID: ServerID(addr), Address: addr})
	}
	for _, a := range trans {
		for _, c := range trans {
			if a != c {
				a.Connect(c.LocalAddr(), c)
			}
		}
	}
	for i := 0; i < n; i++ {
		conf := inmemConfig(b)
		conf.LocalID = servers[i].ID
		conf.LeaderLogWriteParallel = parallel
		conf.Logger = newTestLogger(b)
		store := NewInmemStore()
		logs := slowLogStore{LogStore: store, delay: delay}
		snaps := NewInmemSnapshotStore()
		if err := BootstrapCluster(conf, logs, store, snaps, trans[i], Configuration{Servers: servers}); err != nil {
			b.Fatal(err)
		}
		r, err := NewRaft(conf, &MockFSM{}, logs, store, snaps, trans[i])
		if err != nil {
			b.Fatal(err)
		}
		rafts = append(rafts, r)
	}
	b.Cleanup(func() {
		for _, r := range rafts {
			_ = r.Shutdown().Error()
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, r := range rafts {
			if r.State() == Leader {
				return r
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.Fatal("no leader within 10s")
	return nil
}
