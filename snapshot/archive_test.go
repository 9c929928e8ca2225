package snapshot_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/fsm"
	"github.com/plugreg/plugreg/snapshot"
)

// registry builds a state of n instances over a few types through the
// FSM's own Apply, as the log would.
func registry(t testing.TB, n int) *fsm.State {
	t.Helper()
	f := fsm.New(nil)
	for i := 0; i < n; i++ {
		p := &api.PluginInfo{Type: []string{"csi", "device", "dra"}[i%3], Name: fmt.Sprintf("p%d", i%50), AllocID: fmt.Sprintf("a%d", i),
			NodeID: fmt.Sprintf("n%d", i%7), Version: "1", ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/p.sock"}}
		cmd, err := fsm.EncodeCommand(&fsm.RegisterRequest{Plugin: p})
		if err != nil {
			t.Fatal(err)
		}
		if r := f.Apply(&raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: cmd}); r.(*fsm.ApplyResult).Err != nil {
			t.Fatal(r.(*fsm.ApplyResult).Err)
		}
	}
	return f.State()
}

func archive(t testing.TB, st *fsm.State) []byte {
	t.Helper()
	var buf bytes.Buffer
	meta := snapshot.Meta{Term: 3, NodeID: "n1", Created: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC),
		Servers: []snapshot.Server{{ID: "n1", Address: "127.0.0.1:7300", Voter: true}}}
	if err := snapshot.Encode(&buf, meta, st); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestRoundTrip(t *testing.T) {
	st := registry(t, 600)
	b := archive(t, st)
	meta, got, err := snapshot.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if meta.Index != 600 || meta.Term != 3 || meta.Format != snapshot.Format || meta.Version != snapshot.Version || len(meta.Servers) != 1 {
		t.Fatalf("meta %+v", meta)
	}
	var a, c bytes.Buffer
	fsm.WriteState(&a, st)
	fsm.WriteState(&c, got)
	if !bytes.Equal(a.Bytes(), c.Bytes()) {
		t.Fatal("the decoded state does not snapshot to the same bytes")
	}
	// Encode streams (two passes over the state); Write takes the bytes:
	// the same archive.
	var written bytes.Buffer
	m := snapshot.Meta{Term: 3, NodeID: "n1", Created: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC),
		Servers: []snapshot.Server{{ID: "n1", Address: "127.0.0.1:7300", Voter: true}}, Index: st.Index()}
	if err := snapshot.Write(&written, m, a.Bytes()); err != nil || !bytes.Equal(written.Bytes(), b) {
		t.Fatalf("Write and Encode differ (%v)", err)
	}
	sum := snapshot.Summarize(meta, got)
	if sum.Instances != 600 || sum.Types["csi"].Instances != 200 || sum.Types["device"].Names != 50 {
		t.Fatalf("summary %+v", sum)
	}
}

// tarGz builds an archive member by member, for the refusals.
func tarGz(t *testing.T, members ...[2]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, m := range members {
		tw.WriteHeader(&tar.Header{Name: m[0], Mode: 0o600, Size: int64(len(m[1])), Typeflag: tar.TypeReg})
		tw.Write([]byte(m[1]))
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

// members reads an archive's members back, to rebuild it changed.
func members(t *testing.T, b []byte) [][2]string {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var out [][2]string
	for {
		h, err := tr.Next()
		if err != nil {
			return out
		}
		var buf bytes.Buffer
		buf.ReadFrom(tr)
		out = append(out, [2]string{h.Name, buf.String()})
	}
}

// Every damaged, foreign or newer archive is refused with api.ErrInvalid
// and a message that says which.
func TestRefusals(t *testing.T) {
	good := archive(t, registry(t, 300))
	m := members(t, good)
	flipped := append([]byte(nil), m[1][1]...)
	flipped[len(flipped)/2] ^= 0x40
	newer := strings.Replace(m[0][1], `"Version": 1`, `"Version": 2`, 1)
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "not a plugreg snapshot"},
		{"text", []byte("hello, world\n"), "not a plugreg snapshot"},
		{"another program's tar.gz", tarGz(t, [2]string{"data.json", "{}"}), "not a plugreg snapshot"},
		{"Consul's layout", tarGz(t, [2]string{"meta.json", `{"ID":"2-5-123","Version":1}`}, [2]string{"state.bin", "x"}), "not a plugreg snapshot (format"},
		{"a newer version", tarGz(t, [2]string{"meta.json", newer}, m[1], m[2]), "written by a newer plugreg"},
		{"a flipped bit in the state", tarGz(t, m[0], [2]string{m[1][0], string(flipped)}, m[2]), "corrupted"},
		{"state.bin missing", tarGz(t, m[0]), "truncated"},
		{"SHA256SUMS missing", tarGz(t, m[0], m[1]), "truncated"},
		{"SHA256SUMS wrong", tarGz(t, m[0], m[1], [2]string{"SHA256SUMS", strings.Repeat("0", 64) + "  meta.json\n"}), "corrupted"},
		{"a fourth member", tarGz(t, m[0], m[1], m[2], [2]string{"x", "y"}), "unexpected data"},
		{"a flipped byte in the gzip stream", func() []byte {
			b := append([]byte(nil), good...)
			b[len(b)/2] ^= 0xff
			return b
		}(), ""},
	}
	// Every cut of the file is refused: the last 40 bytes one by one (the
	// gzip trailer, the tar's end), and the rest in steps.
	for n := 0; n < len(good); n += max(1, len(good)/60) {
		cases = append(cases, struct {
			name string
			b    []byte
			want string
		}{fmt.Sprintf("cut at %d of %d", n, len(good)), good[:n], ""})
	}
	for n := len(good) - 40; n < len(good); n++ {
		cases = append(cases, struct {
			name string
			b    []byte
			want string
		}{fmt.Sprintf("cut at %d of %d", n, len(good)), good[:n], ""})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := snapshot.Decode(bytes.NewReader(tc.b))
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v; want api.ErrInvalid saying %q", err, tc.want)
			}
		})
	}
	if _, _, err := snapshot.Decode(bytes.NewReader(good)); err != nil {
		t.Fatalf("the good archive: %v", err)
	}
}
