package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The etcd peer of the -stub-sessions mode. What etcd users build for "a
// process registered exactly while it is alive, told of changes": one
// client per process, connected to one member, with a lease kept alive
// (TTL = the agent's grace, 10 s), its key put with the lease, and a watch
// on the watched prefix. The figures are the member's, as plugreg's are
// the agent's: the process the plugins connect to.

// etcdStubsReport is the same figures for the etcd peer.
type etcdStubsReport struct {
	ConnectSeconds      float64 `json:"connect_seconds"`
	MemberRSSBaseMiB    float64 `json:"member_rss_base_mib"`
	MemberRSSMiB        float64 `json:"member_rss_mib"`
	RSSPerSessionKiB    float64 `json:"rss_per_session_kib"`
	IdleCPUPerSessionUs float64 `json:"idle_cpu_per_session_us_per_s"`
	BurstSeconds        float64 `json:"burst_seconds"`
	CPUPerDeliveryUs    float64 `json:"member_cpu_per_delivery_us"`
	StopSeconds         float64 `json:"stop_seconds"`
}

type etcdSession struct {
	cli   *clientv3.Client
	lease clientv3.LeaseID
	n     atomic.Int64 // watch events received
}

func runStubsEtcd(ctx context.Context, o *options, ec *etcdCluster) (*etcdStubsReport, error) {
	rep := &etcdStubsReport{}
	n, m := o.stubSessions, o.stubBurst
	member := ec.members[0]
	pid := member.proc.pid()
	rss0, err := procStatus(pid, "VmRSS:")
	if err != nil {
		return rep, err
	}
	rep.MemberRSSBaseMiB = mib(rss0)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	sessions := make([]*etcdSession, n)
	defer func() {
		for _, s := range sessions {
			if s != nil {
				s.cli.Close()
			}
		}
	}()

	logf("stubs (etcd): connecting %d clients (lease, keepalive, key, watch) to member %s", n, member.name)
	t0 := time.Now()
	sem := make(chan struct{}, 64)
	var mu sync.Mutex
	var errs []error
	var swg sync.WaitGroup
	for i := range n {
		swg.Add(1)
		sem <- struct{}{}
		go func() {
			defer swg.Done()
			defer func() { <-sem }()
			s, err := openEtcdSession(ctx, member.endpoint(), i, &wg)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			sessions[i] = s
		}()
	}
	swg.Wait()
	if err := errors.Join(errs...); err != nil {
		return rep, fmt.Errorf("stubs (etcd): %d of %d failed: %w", len(errs), n, errs[0])
	}
	rep.ConnectSeconds = time.Since(t0).Seconds()

	cpu0, _ := cpuTime(pid)
	select {
	case <-ctx.Done():
		return rep, ctx.Err()
	case <-time.After(o.agentSettle):
	}
	cpu1, _ := cpuTime(pid)
	rss, err := procStatus(pid, "VmRSS:")
	if err != nil {
		return rep, err
	}
	rep.MemberRSSMiB = mib(rss)
	rep.RSSPerSessionKiB = float64(rss-rss0) / 1024 / float64(n)
	rep.IdleCPUPerSessionUs = float64(cpu1-cpu0) / float64(time.Microsecond) / o.agentSettle.Seconds() / float64(n)

	// The burst: m puts under the watched prefix, 16 writers.
	wcli, err := newEtcdClient(member.endpoint())
	if err != nil {
		return rep, err
	}
	defer wcli.Close()
	cpu0, _ = cpuTime(pid)
	t1 := time.Now()
	err = writeBurst(m, func(k int) error {
		_, err := wcli.Put(ctx, fmt.Sprintf("/plugins/%s/w%05d", stubWatchType, k), "x")
		return err
	})
	if err != nil {
		return rep, fmt.Errorf("stubs (etcd): burst: %w", err)
	}
	if !waitFor(ctx, 2*time.Minute, func() bool {
		for _, s := range sessions {
			if s.n.Load() < int64(m) {
				return false
			}
		}
		return true
	}) {
		return rep, errors.New("stubs (etcd): not every watcher got the burst within 2m")
	}
	rep.BurstSeconds = time.Since(t1).Seconds()
	cpu1, _ = cpuTime(pid)
	rep.CPUPerDeliveryUs = float64(cpu1-cpu0) / float64(time.Microsecond) / float64(m*n)

	// Orderly stop: revoke every lease (its key goes with it).
	t2 := time.Now()
	var rwg sync.WaitGroup
	for _, s := range sessions {
		rwg.Add(1)
		sem <- struct{}{}
		go func() {
			defer rwg.Done()
			defer func() { <-sem }()
			rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
			defer rcancel()
			s.cli.Revoke(rctx, s.lease)
		}()
	}
	rwg.Wait()
	rep.StopSeconds = time.Since(t2).Seconds()
	logf("stubs (etcd): member RSS %.1f KiB per session, idle CPU %.2f µs/s per session, burst %.2fs (%.1f µs per delivery)",
		rep.RSSPerSessionKiB, rep.IdleCPUPerSessionUs, rep.BurstSeconds, rep.CPUPerDeliveryUs)
	return rep, nil
}

// openEtcdSession is one plugin's etcd equivalent; its keepalive and watch
// readers run in wg until ctx ends.
func openEtcdSession(ctx context.Context, endpoint string, i int, wg *sync.WaitGroup) (*etcdSession, error) {
	cli, err := newEtcdClient(endpoint)
	if err != nil {
		return nil, err
	}
	s := &etcdSession{cli: cli}
	lease, err := cli.Grant(ctx, 10)
	if err != nil {
		cli.Close()
		return nil, err
	}
	s.lease = lease.ID
	if _, err := cli.Put(ctx, fmt.Sprintf("/plugins/%s/p%05d", stubType, i), "x", clientv3.WithLease(lease.ID)); err != nil {
		cli.Close()
		return nil, err
	}
	ka, err := cli.KeepAlive(ctx, lease.ID)
	if err != nil {
		cli.Close()
		return nil, err
	}
	wch := cli.Watch(clientv3.WithRequireLeader(ctx), "/plugins/"+stubWatchType+"/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	if first, ok := <-wch; !ok || !first.Created {
		cli.Close()
		return nil, errors.New("watch not created")
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		for range ka {
		}
	}()
	go func() {
		defer wg.Done()
		for resp := range wch {
			s.n.Add(int64(len(resp.Events)))
		}
	}()
	return s, nil
}
