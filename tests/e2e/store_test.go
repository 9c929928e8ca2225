package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	"github.com/plugreg/plugreg/api"

	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/cluster"
	"github.com/plugreg/plugreg/cluster/raftx"
	"github.com/plugreg/plugreg/tests/framework/lazymount"
	"github.com/plugreg/plugreg/tests/framework/proctest"
	"github.com/plugreg/plugreg/tests/framework/testlog"
)

// exitDataErr is the agent's exit status when its data dir holds a store
// it cannot read (sysexits.h EX_DATAERR). A literal, not cmd/plugreg's
// constant: operators and dist/plugreg.service rely on the number itself.
const exitDataErr = 65

// A server whose data dir holds a store it cannot read exits with status
// 65 (the systemd unit does not restart it) at once with one line that names the file, what is wrong and what to do:
// never a panic with a stack, which a supervisor would restart forever.
// The unreadable-entry case is what raft-wal issue 31 left behind (a
// sealed segment that cannot be read); raft.NewRaft panics on it, and the
// agent did too before it checked the log first.
func TestDamagedStoreExitsWithOneLine(t *testing.T) {
	bin := proctest.Build(t, "./cmd/plugreg")
	cases := []struct {
		name     string
		logStore string
		damage   func(t *testing.T, dataDir string) // makes a damaged data dir
		want     string                             // in the line, besides the path
		path     string                             // the file or dir the line names, under the data dir
	}{
		{"wal entry unreadable", "", func(t *testing.T, d string) {
			segs := writeWAL(t, d)
			truncateHalf(t, segs[0])
		}, "entry 1 of", "wal"},
		{"wal segment header zeroed", "", func(t *testing.T, d string) {
			segs := writeWAL(t, d)
			overwrite(t, segs[0], 0, 64)
		}, "WAL is corrupt", "wal"},
		{"wal meta db garbage", "", func(t *testing.T, d string) {
			writeWAL(t, d)
			if err := os.WriteFile(filepath.Join(d, "wal", "wal-meta.db"), bytes.Repeat([]byte("garbage "), 512), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "wal-meta.db", "wal"},
		// One byte changed inside an entry's data, which neither store
		// checks: the entry's checksum (raftx.ChecksumStore) does.
		{"wal entry byte changed", "", func(t *testing.T, d string) {
			writeChecksummed(t, d, cluster.LogStoreWAL, 1)
			changeByteIn(t, filepath.Join(d, "wal", "*.wal"), "entry-50-", 100)
		}, "log entry 50 is damaged: checksum", "wal"},
		{"boltdb entry byte changed", "boltdb", func(t *testing.T, d string) {
			writeChecksummed(t, d, cluster.LogStoreBolt, 1)
			changeByteIn(t, filepath.Join(d, "raft.db"), "entry-50-", 100)
		}, "log entry 50 is damaged: checksum", "raft.db"},
		// A log that starts past the newest snapshot (here: none) would
		// have the FSM skip the entries between.
		{"wal gap before the log", "", func(t *testing.T, d string) {
			writeChecksummed(t, d, cluster.LogStoreWAL, 40)
		}, "entries 1-39 are missing", "wal"},
		// raft passes over a snapshot it cannot read and restores the
		// one before: the log after that one does not reach the state.
		{"snapshot state.bin byte changed", "", func(t *testing.T, d string) {
			ids := writeSnapshots(t, d)
			changeByteIn(t, filepath.Join(d, "snapshots", ids[1], "state.bin"), "state-", 100)
		}, "CRC mismatch", "snapshots"},
		{"snapshot meta.json garbage", "", func(t *testing.T, d string) {
			ids := writeSnapshots(t, d)
			if err := os.WriteFile(filepath.Join(d, "snapshots", ids[1], "meta.json"), []byte("{garbage"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "meta.json cannot be read", "snapshots"},
		// raft's term and vote: a changed byte could let it vote twice.
		{"wal meta db term byte changed", "", func(t *testing.T, d string) {
			_, stable, closer := openTestStore(t, d, cluster.LogStoreWAL)
			err := (raftx.ChecksumStableStore{StableStore: stable}).SetUint64([]byte("CurrentTerm"), 5)
			closer.Close()
			if err != nil {
				t.Fatal(err)
			}
			// The value's first byte, past its 4-byte checksum.
			changeByteIn(t, filepath.Join(d, "wal", "wal-meta.db"), "prs1", 4)
		}, `value of "CurrentTerm" is damaged`, ""},
		{"boltdb garbage", "boltdb", func(t *testing.T, d string) {
			if err := os.WriteFile(filepath.Join(d, "raft.db"), bytes.Repeat([]byte("garbage "), 8192), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "invalid database", "raft.db"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			dataDir := filepath.Join(dir, "data")
			if err := os.MkdirAll(dataDir, 0o750); err != nil {
				t.Fatal(err)
			}
			tc.damage(t, dataDir)
			args := serverArgs(t, "n1", dataDir)
			if tc.logStore != "" {
				args = append(args, "-log-store", tc.logStore)
			}
			cmd := exec.Command(bin, args...)
			refusedInOneLine(t, cmd, exitDataErr, filepath.Join(dataDir, tc.path), tc.want, "remove-peer n1", "empty data dir")
		})
	}
}

// A byte changed in the data dir's node-id is refused in one line: the
// dir names another node now, and an agent never runs as a node its data
// dir does not belong to.
func TestNodeIDByteChangedRefused(t *testing.T) {
	bin := proctest.Build(t, "./cmd/plugreg")
	dataDir := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeWAL(t, dataDir)
	if err := os.WriteFile(filepath.Join(dataDir, "node-id"), []byte("n1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	changeByteIn(t, filepath.Join(dataDir, "node-id"), "n", 0) // n1 -> n0
	refusedInOneLine(t, exec.Command(bin, serverArgs(t, "n1", dataDir)...), 1, "data dir "+dataDir+" belongs to node", `not "n1"`)
}

// A second agent started on a data dir another agent runs on is refused
// at once in one line naming the first's process: without the data dir's
// lock, bbolt makes it wait on raft.db's file lock forever, silent.
func TestSecondAgentOnADataDirRefused(t *testing.T) {
	bin := proctest.Build(t, "./cmd/plugreg")
	for _, logStore := range []string{cluster.LogStoreWAL, cluster.LogStoreBolt} {
		t.Run(logStore, func(t *testing.T) {
			dataDir := filepath.Join(t.TempDir(), "data")
			first := exec.Command(bin, append(serverArgs(t, "n1", dataDir), "-log-store", logStore)...)
			var out bytes.Buffer
			first.Stdout, first.Stderr = &out, &out
			if err := first.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				first.Process.Kill()
				first.Wait()
			}()
			pid := strconv.Itoa(first.Process.Pid)
			deadline := time.Now().Add(60 * time.Second)
			for {
				b, _ := os.ReadFile(filepath.Join(dataDir, "agent.lock"))
				if first, _, _ := strings.Cut(string(b), "\n"); first == pid {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the first agent never held its data dir:\n%s", out.String())
				}
				time.Sleep(50 * time.Millisecond)
			}
			second := exec.Command(bin, append(serverArgs(t, "n1", dataDir), "-log-store", logStore)...)
			host, _ := os.Hostname()
			refusedInOneLine(t, second, 1, dataDir, "in use by another agent (pid "+pid+" on host "+host+")")
		})
	}
}

// A failed fsync of the log stops the server: it exits with status 65
// and a last line that names the failure and what to do, rather than
// reopening the log and reading back from the page cache what the disk
// may never have had. The data dir is on lazyfs, whose FailSync fails
// the next fsync of a segment as Linux does after a failed writeback.
func TestFailedSyncStopsTheServer(t *testing.T) {
	bin := proctest.Build(t, "./cmd/plugreg")
	m := lazymount.New(t)
	dataDir := filepath.Join(m.Dir, "data")
	args := serverArgs(t, "n1", dataDir)
	cmd := exec.Command(bin, args...)
	out, done := startCaptured(t, cmd)
	exited := false
	defer func() {
		if !exited {
			cmd.Process.Kill()
			<-done
		}
	}()
	c, err := client.New(client.Config{Addrs: []string{"127.0.0.1:" + args[slices.Index(args, "-http-port")+1]}})
	if err != nil {
		t.Fatal(err)
	}
	register := func(alloc string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := c.Register(ctx, &api.PluginInfo{Type: "csi", Name: "ebs", AllocID: alloc, ConnectionInfo: &api.ConnectionInfo{SocketPath: "/run/ebs.sock"}})
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for register("a1") != nil {
		if time.Now().After(deadline) {
			t.Fatalf("no write was acknowledged:\n%s", out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	failed := m.FailSync(".wal")
	if err := register("a2"); err == nil {
		t.Fatal("a write whose fsync failed was acknowledged")
	}
	select {
	case f := <-failed:
		t.Logf("failed the fsync of %s (%d dirty pages dropped)", f.Name, f.Dropped)
	case <-time.After(10 * time.Second):
		t.Fatal("the write never reached an fsync")
	}
	select {
	case err := <-done:
		exited = true
		// Raft logs the failed write as an error line before it.
		wantLastLine(t, err, out.String(), exitDataErr, "stopped: the data dir cannot be trusted", "fsync of "+filepath.Join(dataDir, "wal"), "input/output error", "remove-peer n1", "empty data dir")
	case <-time.After(60 * time.Second):
		t.Fatalf("the server did not stop after its fsync failed:\n%s", out.String())
	}
}

// serverArgs are the arguments of a one-server cluster's agent on free
// ports of 127.0.0.1.
func serverArgs(t *testing.T, node, dataDir string) []string {
	p := proctest.FreePorts(t, "127.0.0.1", 3)
	return []string{"agent", "-node", node, "-data-dir", dataDir, "-bind", "127.0.0.1",
		"-http-port", strconv.Itoa(p[0]), "-server-port", strconv.Itoa(p[1]), "-gossip-port", strconv.Itoa(p[2]), "-bootstrap-expect", "1"}
}

// refusedInOneLine runs cmd and wants it to exit with status code within a
// minute, as wantRefusal says.
func refusedInOneLine(t *testing.T, cmd *exec.Cmd, code int, wants ...string) {
	t.Helper()
	out, done := startCaptured(t, cmd)
	select {
	case err := <-done:
		wantRefusal(t, err, out.String(), code, wants...)
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("the agent did not exit:\n%s", out.String())
	}
}

// startCaptured starts cmd with its output captured; done receives its
// exit once.
func startCaptured(t *testing.T, cmd *exec.Cmd) (*testlog.Buffer, <-chan error) {
	t.Helper()
	out := new(testlog.Buffer)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	return out, done
}

// wantRefusal wants an agent's exit err to be status code, with no panic
// in its output out, and one error line, its last, saying each of wants.
func wantRefusal(t *testing.T, err error, out string, code int, wants ...string) {
	t.Helper()
	lines := wantLastLine(t, err, out, code, wants...)
	for _, l := range lines[:len(lines)-1] {
		if strings.Contains(l, "[ERROR]") {
			t.Errorf("more than one error line:\n%s", out)
		}
	}
}

// wantLastLine wants an agent's exit err to be status code, with no panic
// in its output out, and a last line saying each of wants; it returns the
// lines.
func wantLastLine(t *testing.T, err error, out string, code int, wants ...string) []string {
	t.Helper()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != code {
		t.Fatalf("exit %v, want status %d:\n%s", err, code, out)
	}
	if strings.Contains(out, "panic") || strings.Contains(out, "goroutine ") {
		t.Fatalf("a panic or a stack on stderr:\n%s", out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	for _, want := range wants {
		if !strings.Contains(last, want) {
			t.Errorf("the last line does not say %q:\n%s", want, last)
		}
	}
	return lines
}

// writeWAL writes a raft-wal log of 100 entries in small segments under
// dataDir/wal, as a server's would be after a busy while, and returns the
// segment files in order.
func writeWAL(t *testing.T, dataDir string) []string {
	t.Helper()
	dir := filepath.Join(dataDir, "wal")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	w, err := wal.Open(dir, wal.WithSegmentSize(64<<10), wal.WithLogger(hclog.NewNullLogger()))
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 100; i++ {
		if err := w.StoreLogs([]*raft.Log{{Index: i, Term: 1, Type: raft.LogCommand, Data: bytes.Repeat([]byte{byte(i)}, 4096)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	segs, err := filepath.Glob(filepath.Join(dir, "*.wal"))
	if err != nil || len(segs) < 2 {
		t.Fatalf("want several segments, have %v (%v)", segs, err)
	}
	return segs
}

func truncateHalf(t *testing.T, path string) {
	t.Helper()
	st, err := os.Stat(path)
	if err == nil {
		err = os.Truncate(path, st.Size()/2)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func overwrite(t *testing.T, path string, off, n int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err == nil {
		_, err = f.WriteAt(make([]byte, n), off)
		f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// openTestStore opens (creating) a log and stable store of kind under
// dataDir, where a server keeps it.
func openTestStore(t *testing.T, dataDir, kind string) (raft.LogStore, raft.StableStore, io.Closer) {
	t.Helper()
	switch kind {
	case cluster.LogStoreWAL:
		dir := filepath.Join(dataDir, "wal")
		if err := os.MkdirAll(dir, 0o750); err != nil {
			t.Fatal(err)
		}
		w, err := raftx.OpenWAL(dir, 64<<10, hclog.NewNullLogger())
		if err != nil {
			t.Fatal(err)
		}
		return w, w, w
	case cluster.LogStoreBolt:
		b, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dataDir, "raft.db")})
		if err != nil {
			t.Fatal(err)
		}
		return b, b, b
	}
	t.Fatalf("log store %q", kind)
	return nil, nil, nil
}

// writeChecksummed writes entries from..100 under dataDir as a server's
// store of kind holds them (through raftx.ChecksumStore), each entry's
// data starting "entry-N-".
func writeChecksummed(t *testing.T, dataDir, kind string, from uint64) {
	t.Helper()
	store, stable, closer := openTestStore(t, dataDir, kind)
	defer closer.Close()
	checked, err := raftx.WithChecksums(store, stable)
	if err != nil {
		t.Fatal(err)
	}
	for i := from; i <= 100; i++ {
		data := append([]byte(fmt.Sprintf("entry-%d-", i)), bytes.Repeat([]byte{'x'}, 2000)...)
		if err := checked.StoreLogs([]*raft.Log{{Index: i, Term: 1, Type: raft.LogCommand, Data: data}}); err != nil {
			t.Fatal(err)
		}
	}
}

// changeByteIn flips a bit of the byte offset bytes past the first marker
// in the files glob matches: a bit flipped on disk.
func changeByteIn(t *testing.T, glob, marker string, offset int) {
	t.Helper()
	files, err := filepath.Glob(glob)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if i := bytes.Index(b, []byte(marker)); i >= 0 {
			b[i+len(marker)+offset] ^= 0x01
			if err := os.WriteFile(f, b, 0o600); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("%q is in none of %v", marker, files)
}

// writeSnapshots writes two snapshots under dataDir, as raft's file
// snapshot store keeps them, and returns their IDs, oldest first.
func writeSnapshots(t *testing.T, dataDir string) []string {
	t.Helper()
	store, err := raft.NewFileSnapshotStore(dataDir, 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	conf := raft.Configuration{Servers: []raft.Server{{ID: "n1", Address: "127.0.0.1:1", Suffrage: raft.Voter}}}
	_, trans := raft.NewInmemTransport("127.0.0.1:1") // Create encodes the peers through one
	defer trans.Close()
	var ids []string
	for _, index := range []uint64{10, 20} {
		sink, err := store.Create(raft.SnapshotVersionMax, index, 1, conf, 1, trans)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sink.Write(append([]byte("state-"), bytes.Repeat([]byte{'s'}, 1000)...)); err != nil {
			t.Fatal(err)
		}
		if err := sink.Close(); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sink.ID())
	}
	return ids
}
