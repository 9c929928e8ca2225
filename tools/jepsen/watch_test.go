package main

import (
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

func TestStreamTapNotesResets(t *testing.T) {
	reset := `{"Index":120,"EventType":"reset","Plugins":[` + strings.Repeat(`{"Type":"t0","Name":"n0","AllocID":"a0","Version":"v"},`, 50) + `{}]}`
	for _, tc := range []struct {
		name   string
		stream string
		want   map[uint64]tapConn
	}{
		{name: "events only", stream: `{"Index":7,"EventType":"registered","Info":{"Type":"t0"}}` + "\n" + `{"Index":8,"EventType":"heartbeat"}` + "\n",
			want: map[uint64]tapConn{}},
		{name: "a long reset among events", stream: `{"Index":7,"EventType":"registered"}` + "\n" + reset + "\n" + `{"Index":121,"EventType":"updated"}` + "\n",
			want: map[uint64]tapConn{120: {node: "n2", from: 7}}},
		{name: "a reset cut short by the end of the stream", stream: reset[:40],
			want: map[uint64]tapConn{}},
		{name: "a word reset in a plugin is not a reset", stream: `{"Index":9,"EventType":"registered","Info":{"Name":"reset"}}` + "\n",
			want: map[uint64]tapConn{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tap := &streamTap{resets: map[uint64]tapConn{}}
			// One byte per Read: every line is split everywhere it can be.
			body := &tapBody{ReadCloser: io.NopCloser(iotest.OneByteReader(strings.NewReader(tc.stream))), tap: tap, conn: tapConn{node: "n2", from: 7}}
			got, err := io.ReadAll(body)
			if err != nil || string(got) != tc.stream {
				t.Fatalf("the tap changed the stream: %v", err)
			}
			if !reflect.DeepEqual(tap.resets, tc.want) {
				t.Fatalf("resets %v, want %v", tap.resets, tc.want)
			}
		})
	}
}

// A minute of the slow consumer: every slow phase has exactly one pause
// past the client's stall timeout, the other waits are 200-400 ms, and
// every phase ends in a burst that drains the channel.
func TestPaceStallsOncePerPhaseThenDrains(t *testing.T) {
	stall := 2 * time.Second
	p := newPace(1, stall)
	now, end := p.phaseFrom, p.phaseFrom.Add(time.Minute)
	phases, pauses, drains := map[time.Time]int{p.phaseFrom: 0}, 0, 0
	for queued := 64; now.Before(end); {
		wasDraining := p.draining
		d := p.next(now, queued)
		switch {
		case wasDraining:
			if d != 0 {
				t.Fatalf("a wait of %v while draining", d)
			}
			drains++
			queued--
			if !p.draining {
				queued = 64 // emptied: the next phase starts on a full channel
			}
		case p.draining: // this receive ended the slow phase
			if d != 0 {
				t.Fatalf("a wait of %v at the start of a drain", d)
			}
		case d > stall:
			phases[p.phaseFrom]++
			pauses++
		case d < 200*time.Millisecond || d >= 400*time.Millisecond:
			t.Fatalf("a wait of %v in a slow phase", d)
		}
		phases[p.phaseFrom] += 0
		now = now.Add(d + time.Millisecond)
	}
	if len(phases) < 5 || drains == 0 {
		t.Fatalf("%d phases, %d drained receives in a minute", len(phases), drains)
	}
	for from, n := range phases {
		if n > 1 || (n == 0 && end.Sub(from) > 3*time.Second) {
			t.Fatalf("the phase from %v paused past the stall timeout %d times", from.Sub(p.phaseFrom), n)
		}
	}
	if pauses < len(phases)-1 {
		t.Fatalf("%d long pauses in %d phases", pauses, len(phases))
	}
}
