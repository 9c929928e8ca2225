package httpapi

import (
	"fmt"
	"testing"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/backend"
	"github.com/plugreg/plugreg/filter"
)

// Under a steady flow of changes the filter drops, a filtered stream
// still writes a heartbeat once a period, at the index below the change
// that brought it; a stream with writes of its own gets none.
func TestFilteredStreamHeartbeatsThroughDroppedChanges(t *testing.T) {
	f, err := filter.Compile(`Name == "keep"`)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	sf := newStreamFilter(f, time.Second, t0)
	change := func(i uint64, name string) backend.Event {
		return backend.Event{Event: &api.Event{Index: i, EventType: api.EventRegistered, Info: &api.PluginInfo{Name: name}}, Shared: &backend.Encodings{}}
	}
	var got []string
	for i := uint64(1); i <= 30; i++ {
		name := "drop"
		if i == 12 {
			name = "keep"
		}
		ev := change(i, name)
		out, err := sf.pass(ev, t0.Add(time.Duration(i)*200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range out {
			got = append(got, fmt.Sprintf("%s@%d", e.EventType, e.Index))
			if e.EventType == api.EventRegistered && e.Shared != ev.Shared {
				t.Error("a matching change lost its shared encodings")
			}
		}
	}
	want := "[heartbeat@4 heartbeat@9 registered@12 heartbeat@16 heartbeat@21 heartbeat@26]"
	if fmt.Sprint(got) != want {
		t.Fatalf("got %v, want %s", got, want)
	}
}
