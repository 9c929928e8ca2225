package cluster

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/gossip"
	"golang.org/x/time/rate"
)

// The guard holds failed nodes only with at least PauseMinFailed client
// agents failed and more than PauseAbove of them: one or two deaths among
// few agents are reaped, a dark majority is not, and PauseAbove 1 never
// holds.
func TestReapGuardHolds(t *testing.T) {
	d := DefaultReapBrakes()
	off := d
	off.PauseAbove = 1
	for _, tc := range []struct {
		name            string
		brakes          ReapBrakes
		failed, clients int
		want            bool
	}{
		{"the only agent", d, 1, 1, false},
		{"both of two", d, 2, 2, false},
		{"one of four", d, 1, 4, false},
		{"three of three", d, 3, 3, true},
		{"three of four", d, 3, 4, true},
		{"half of ten", d, 5, 10, false},
		{"six of ten", d, 6, 10, true},
		{"exactly 55 of 100", d, 55, 100, false},
		{"56 of 100", d, 56, 100, true},
		{"threshold 1, all of ten", off, 10, 10, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.brakes.holds(tc.failed, tc.clients); got != tc.want {
				t.Fatalf("holds(%d, %d) = %v, want %v", tc.failed, tc.clients, got, tc.want)
			}
		})
	}
}

// Only client agents count: alive ones, and failed ones with plugins
// still registered. Servers, agents that left and failed agents without
// plugins (reaped already) count for nothing.
func TestReapCensus(t *testing.T) {
	member := func(name, role string, st gossip.Status) gossip.Member {
		return gossip.Member{Name: name, Status: st, Meta: gossip.Meta{ID: name, Role: role}}
	}
	members := []gossip.Member{
		member("s1", api.RoleServer, gossip.StatusAlive),
		member("s2", api.RoleServer, gossip.StatusFailed),
		member("alive", api.RoleClient, gossip.StatusAlive),
		member("alive-bare", api.RoleClient, gossip.StatusAlive),
		member("failed", api.RoleClient, gossip.StatusFailed),
		member("failed-reaped", api.RoleClient, gossip.StatusFailed),
		member("left", api.RoleClient, gossip.StatusLeft),
	}
	plugins := map[string]bool{"s2": true, "alive": true, "failed": true, "left": true}
	failed, clients := census(members, func(node string) bool { return plugins[node] })
	if failed != 1 || clients != 3 {
		t.Fatalf("census: %d failed of %d clients, want 1 of 3", failed, clients)
	}
}

// The bucket gives Burst tokens at once, then one every 1/Rate seconds,
// and says how long until the next; a negative rate never runs out.
func TestReapTokenBucket(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := newTokenBucket(0.5, 2) // one every 2s
	for i := 0; i < 2; i++ {
		if wait := b.take(t0); wait != 0 {
			t.Fatalf("take %d of the burst: wait %v", i, wait)
		}
	}
	wait := b.take(t0)
	if wait < 2*time.Second || wait > 2*time.Second+5*time.Millisecond {
		t.Fatalf("past the burst: wait %v, want 2s", wait)
	}
	if w := b.take(t0.Add(time.Second)); w < time.Second || w > time.Second+5*time.Millisecond {
		t.Fatalf("half a token later: wait %v, want 1s", w)
	}
	if w := b.take(t0.Add(wait)); w != 0 {
		t.Fatalf("when the wait said: wait %v", w)
	}
	if w := b.take(t0.Add(wait)); w == 0 {
		t.Fatal("a second token at the same instant")
	}
	// Idle for long: the bucket refills to the burst, no further.
	later := t0.Add(time.Hour)
	for i := 0; i < 2; i++ {
		if w := b.take(later); w != 0 {
			t.Fatalf("take %d after an hour: wait %v", i, w)
		}
	}
	if w := b.take(later); w == 0 {
		t.Fatal("more than the burst after an hour")
	}

	unlimited := newTokenBucket(-1, 1)
	for i := 0; i < 100; i++ {
		if w := unlimited.take(t0); w != 0 {
			t.Fatalf("a negative rate ran out at %d: wait %v", i, w)
		}
	}
}

// The guard logs one line when it engages and one when it releases; an
// operator's resume lets reaping go on until the release, and the next
// mass failure holds again. A resume with the guard released changes
// nothing. A release by agents coming back starts the grace of the nodes
// still failed (releasedAt); a release after a resume does not.
func TestReapGuardEpisodes(t *testing.T) {
	var logs bytes.Buffer
	b := newReapBrakes(DefaultReapBrakes(), hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info}))
	lines := func() int { return strings.Count(logs.String(), "\n") }
	t0 := time.Unix(1000, 0)
	steps := []struct {
		name            string
		failed, clients int
		resume          bool
		wantHold        bool
		wantLines       int // logged so far
		wantReleased    int // releasedAt, in steps from t0 (-1: never)
	}{
		{"all well", 0, 10, false, false, 0, -1},
		{"resume with nothing held", 1, 10, true, false, 0, -1},
		{"a rack goes dark", 6, 10, false, true, 1, -1},
		{"still dark", 7, 10, false, true, 1, -1},
		{"agents come back", 5, 10, false, false, 2, 4},
		{"dark again", 6, 10, false, true, 3, 4},
		{"an operator resumes", 7, 10, true, false, 4, 4},
		{"reaping goes on", 6, 10, false, false, 4, 4},
		{"reaped within the threshold", 5, 10, false, false, 5, 4},
		{"dark once more", 6, 10, false, true, 6, 4},
	}
	for i, st := range steps {
		if st.resume {
			b.resume()
		}
		if got := b.observe(st.failed, st.clients, t0.Add(time.Duration(i)*time.Second)); got != st.wantHold {
			t.Fatalf("%s: hold %v, want %v", st.name, got, st.wantHold)
		}
		if got := b.status().Paused; got != st.wantHold {
			t.Fatalf("%s: status paused %v, want %v", st.name, got, st.wantHold)
		}
		if lines() != st.wantLines {
			t.Fatalf("%s: %d log lines, want %d:\n%s", st.name, lines(), st.wantLines, logs.String())
		}
		want := time.Time{}
		if st.wantReleased >= 0 {
			want = t0.Add(time.Duration(st.wantReleased) * time.Second)
		}
		if !b.releasedAt.Equal(want) {
			t.Fatalf("%s: released at %v, want %v", st.name, b.releasedAt, want)
		}
	}
	for _, want := range []string{"reaping paused", "reaping resumed by an operator", "reaping no longer paused"} {
		if !strings.Contains(logs.String(), want) {
			t.Fatalf("no %q in the log:\n%s", want, logs.String())
		}
	}
}

func TestReapBrakesValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		brakes ReapBrakes
		want   string // "" for valid
	}{
		{"zero: the defaults", ReapBrakes{}, ""},
		{"defaults", DefaultReapBrakes(), ""},
		{"no rate limit, guard off", ReapBrakes{Rate: -1, PauseAbove: 1}, ""},
		{"rate NaN", ReapBrakes{Rate: math.NaN()}, "node reap rate NaN"},
		{"rate infinite", ReapBrakes{Rate: math.Inf(1)}, "node reap rate +Inf"},
		{"negative burst", ReapBrakes{Burst: -1}, "node reap burst -1"},
		{"threshold over 1", ReapBrakes{PauseAbove: 1.5}, "node reap pause above 1.5"},
		{"threshold negative", ReapBrakes{PauseAbove: -0.1}, "node reap pause above -0.1"},
		{"threshold NaN", ReapBrakes{PauseAbove: math.NaN()}, "node reap pause above NaN"},
		{"negative minimum", ReapBrakes{PauseMinFailed: -1}, "node reap pause min failed -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.brakes.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// Nodes are due once gone for longer than NodeReapAfter, longest gone
// first; a failed node's time counts from the guard's last release at
// the earliest, one that left has no such grace, and nodes alive or done
// with are never due.
func TestDueForReaping(t *testing.T) {
	now := time.Unix(10000, 0)
	const after = 30 * time.Second
	member := func(name string, st gossip.Status, gone time.Duration) gossip.Member {
		return gossip.Member{Name: name, Status: st, Since: now.Add(-gone), Meta: gossip.Meta{ID: name, Role: api.RoleClient}}
	}
	members := []gossip.Member{
		member("alive", gossip.StatusAlive, time.Hour),
		member("fresh", gossip.StatusFailed, 10*time.Second),
		member("failed", gossip.StatusFailed, time.Minute),
		member("failed-longer", gossip.StatusFailed, 2*time.Minute),
		member("left", gossip.StatusLeft, time.Minute),
		member("reaped", gossip.StatusFailed, time.Hour),
	}
	reaped := map[string]bool{"reaped": true}
	for _, tc := range []struct {
		name     string
		released time.Time
		want     []string
	}{
		{"never released", time.Time{}, []string{"failed-longer", "failed", "left"}},
		{"released long ago", now.Add(-time.Hour), []string{"failed-longer", "failed", "left"}},
		{"released 40s ago", now.Add(-40 * time.Second), []string{"failed-longer", "failed", "left"}},
		{"released 20s ago", now.Add(-20 * time.Second), []string{"left"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, m := range dueForReaping(members, reaped, now, after, tc.released) {
				got = append(got, m.Name)
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("due: %v, want %v", got, tc.want)
			}
		})
	}
}

// With no rate set, the leader reaps ReapRateFraction of the client
// agents a second, never below 1, and holds a second's worth at once (a
// thousand dead hosts of ten thousand are reaped in ten seconds, one pass
// of the leader loop a second, not in seventeen minutes); a rate the
// operator set, or no limit, stays as set, with its burst.
func TestReapRateScalesWithTheFleet(t *testing.T) {
	d := DefaultReapBrakes()
	fixed := d
	fixed.Rate = 0.5
	unlimited := d
	unlimited.Rate = -1
	bigBurst := d
	bigBurst.Burst = 10
	for _, tc := range []struct {
		name      string
		brakes    ReapBrakes
		clients   int
		wantRate  float64 // 0: no limit
		wantBurst int
	}{
		{"no agents", d, 0, 1, 3},
		{"100 agents", d, 100, 1, 3},
		{"1,000 agents", d, 1000, 10, 10},
		{"10,000 agents", d, 10_000, 100, 100},
		{"50,000 agents", d, 50_000, 500, 500},
		{"a burst above a second's worth", bigBurst, 500, 5, 10},
		{"rate set, 10,000 agents", fixed, 10_000, 0.5, 3},
		{"no limit, 10,000 agents", unlimited, 10_000, 0, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t0 := time.Unix(1000, 0)
			b := newReapBrakes(tc.brakes.withDefaults(), hclog.NewNullLogger())
			b.observe(0, tc.clients, t0)
			want := rate.Limit(tc.wantRate)
			if tc.wantRate == 0 {
				want = rate.Inf
			}
			if got := b.bucket.lim.Limit(); got != want {
				t.Fatalf("rate %v, want %v", got, want)
			}
			if got := b.bucket.lim.Burst(); got != tc.wantBurst {
				t.Fatalf("burst %d, want %d", got, tc.wantBurst)
			}
			if tc.wantRate == 0 {
				return
			}
			// A second after the bucket was emptied, a pass reaps a
			// second's worth (up to the burst).
			for b.bucket.take(t0) == 0 {
			}
			later := t0.Add(time.Second)
			b.observe(0, tc.clients, later)
			n := 0
			for b.bucket.take(later) == 0 {
				n++
			}
			if want := min(tc.wantBurst, int(tc.wantRate)); n != want {
				t.Fatalf("a second later: %d reaps at once, want %d", n, want)
			}
		})
	}
}

// The leader's reaped set keeps only nodes still failed or gone in its
// gossip: one alive again is due anew when it next fails, and one gossip
// forgot (GossipForgetAfter) no longer takes room, so that the set does
// not grow with every host that ever died.
func TestPruneReaped(t *testing.T) {
	member := func(name string, st gossip.Status) gossip.Member {
		return gossip.Member{Name: name, Status: st, Meta: gossip.Meta{ID: name, Role: api.RoleClient}}
	}
	members := []gossip.Member{member("alive-again", gossip.StatusAlive), member("failed", gossip.StatusFailed),
		member("left", gossip.StatusLeft), member("failed-not-reaped", gossip.StatusFailed)}
	reaped := map[string]bool{"alive-again": true, "failed": true, "left": true, "forgotten": true}
	pruneReaped(reaped, members)
	var got []string
	for name := range reaped {
		got = append(got, name)
	}
	slices.Sort(got)
	if want := []string{"failed", "left"}; !slices.Equal(got, want) {
		t.Fatalf("reaped after pruning: %v, want %v", got, want)
	}
}
