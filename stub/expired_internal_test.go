package stub

import (
	"context"
	"testing"

	"github.com/plugreg/plugreg/api"
)

type deregOnly struct{ got []api.EventType }

func (d *deregOnly) Deregistered(_ context.Context, ev *api.Event) error {
	d.got = append(d.got, ev.EventType)
	return nil
}

type withExpired struct {
	deregOnly
	expired []api.EventType
}

func (w *withExpired) Expired(_ context.Context, ev *api.Event) error {
	w.expired = append(w.expired, ev.EventType)
	return nil
}

// An expiry reaches a plugin's Expired handler when it has one, and its
// Deregistered handler when that is all it has: the instance is gone
// either way. A mask without either drops it.
func TestExpiredReachesTheHandlerThatKnowsIt(t *testing.T) {
	ev := &api.Event{Index: 7, EventType: api.EventExpired, Info: &api.PluginInfo{Type: "t", Name: "n", AllocID: "a"}}
	ctx := context.Background()
	newStub := func(p any, opts ...Option) *Stub {
		t.Helper()
		s, err := New(p, append([]Option{WithPluginType("t"), WithPluginName("n"), WithPluginIdx("00"), WithEndpoint("/run/n.sock")}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	d := &deregOnly{}
	s := newStub(d)
	if s.mask != Deregistered {
		t.Fatalf("derived mask %b", s.mask)
	}
	if !s.wants(ev) {
		t.Fatal("a plugin that handles deregistrations does not want an expiry")
	}
	if what, err := s.dispatch(ctx, item{ev}); what != "Deregistered" || err != nil || len(d.got) != 1 || d.got[0] != api.EventExpired {
		t.Fatalf("dispatched to %s (%v): %v", what, err, d.got)
	}

	w := &withExpired{}
	s = newStub(w)
	if s.mask != Deregistered|Expired {
		t.Fatalf("derived mask %b", s.mask)
	}
	if what, err := s.dispatch(ctx, item{ev}); what != "Expired" || err != nil || len(w.expired) != 1 || len(w.got) != 0 {
		t.Fatalf("dispatched to %s (%v): expired %v, deregistered %v", what, err, w.expired, w.got)
	}

	s = newStub(d, WithEventMask(Registered))
	if s.wants(ev) {
		t.Fatal("a mask of registrations wants an expiry")
	}
}
