package cluster

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/fsm"
)

// A re-registration that races an expiry wins: the leader decided to
// expire a registration (its batch is taken, the entry not yet proposed),
// the holder registers again meanwhile, and the expiry entry, conditional
// on the registration it decided on, leaves the new one in place; that
// one's own lease then runs, and ends, as any other.
func TestReRegistrationRacingAnExpiryWins(t *testing.T) {
	s := soloServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	taken := make(chan []fsm.ExpiredLease, 1)
	release := make(chan struct{})
	var once sync.Once
	defer once.Do(func() { close(release) })
	hook := func(batch []fsm.ExpiredLease) {
		select {
		case taken <- batch:
			<-release
		default: // later batches pass
		}
	}
	s.lead.expireHook.Store(&hook)

	p := leasedPlugin("a1", time.Second)
	first, err := s.Backend().Register(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	var batch []fsm.ExpiredLease
	select {
	case batch = <-taken:
	case <-ctx.Done():
		t.Fatal("the lease never came due")
	}
	if len(batch) != 1 || batch[0].ModifyIndex != first.Index {
		t.Fatalf("batch %+v, want a1@%d", batch, first.Index)
	}
	again := p.Copy()
	again.Version = "2"
	second, err := s.Backend().Register(ctx, again)
	if err != nil || second.Result != api.ResultUpdated {
		t.Fatalf("re-registration: %+v %v", second, err)
	}
	once.Do(func() { close(release) })

	waitFor(t, 30*time.Second, "the expiry entry", func() bool { return s.LeaseStats().ExpiryEntries >= 1 })
	if got := s.State().Instance("csi", "ebs", "a1"); got == nil || got.ModifyIndex != second.Index {
		t.Fatalf("after the racing expiry: %+v, want the re-registration at %d", got, second.Index)
	}
	if st := s.LeaseStats(); st.Expired != 0 {
		t.Fatalf("the expiry removed %d instances", st.Expired)
	}
	// The re-registration's own lease, not renewed, runs out in turn
	// (the counts move once the expiry's proposal has returned, a moment
	// after the state did).
	waitFor(t, 30*time.Second, "the re-registration to expire", func() bool {
		st := s.LeaseStats()
		return s.State().Instance("csi", "ebs", "a1") == nil && st.Expired == 1 && st.Leases == 0
	})
	if st := s.LeaseStats(); st.ExpiryEntries != 2 {
		t.Fatalf("lease stats %+v, want two expiry entries", st)
	}
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
