package pluginpb

import (
	"testing"

	"github.com/plugreg/plugreg/api"
)

// Every event type has a kind and comes back from it; an unknown one maps
// to UNSPECIFIED and back to "".
func TestEventKindsRoundTrip(t *testing.T) {
	for _, typ := range []api.EventType{api.EventRegistered, api.EventUpdated, api.EventDeregistered, api.EventReset, api.EventHeartbeat} {
		k := KindOf(typ)
		if k == EventKind_EVENT_KIND_UNSPECIFIED {
			t.Errorf("%s has no kind", typ)
		}
		if got := k.APIType(); got != typ {
			t.Errorf("%s -> %v -> %q", typ, k, got)
		}
	}
	if k := KindOf("renamed"); k != EventKind_EVENT_KIND_UNSPECIFIED || k.APIType() != "" {
		t.Errorf("unknown type -> %v -> %q", k, k.APIType())
	}
}
