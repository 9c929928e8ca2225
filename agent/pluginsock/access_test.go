package pluginsock_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/plugreg/plugreg/agent/pluginsock"
	"github.com/plugreg/plugreg/api"
	pb "github.com/plugreg/plugreg/api/pluginpb"
	"github.com/plugreg/plugreg/api/pluginrpc"
	"github.com/plugreg/plugreg/backend"
)

// recorder is a Registrar that records the writes it is asked for.
type recorder struct {
	mu   sync.Mutex
	puts []*api.PluginInfo
}

func (r *recorder) Put(_ context.Context, info *api.PluginInfo) (api.WriteResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.puts = append(r.puts, info)
	return api.WriteResult{Index: uint64(len(r.puts))}, nil
}

func (r *recorder) Deregister(context.Context, *api.PluginInfo) error { return nil }

func (r *recorder) written() []*api.PluginInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.puts)
}

// quietEvents is a node whose event stream has nothing to say.
type quietEvents struct{}

func (quietEvents) Subscribe(context.Context, []string, *uint64, time.Duration) (<-chan backend.Event, uint64, error) {
	return make(chan backend.Event), 7, nil
}

// logBuffer collects a logger's output for the test to read.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// socketDir is a directory for sockets that every user may traverse.
func socketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "psock") // short: 107 bytes at most
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// listenRecorded serves a socket in dir whose writes go to a recorder and
// whose log to a buffer.
func listenRecorded(t *testing.T, dir string, modify func(*pluginsock.Config)) (*pluginsock.Server, *recorder, *logBuffer) {
	t.Helper()
	rec, logs := &recorder{}, &logBuffer{}
	cfg := pluginsock.Config{
		Path: filepath.Join(dir, "p.sock"), NodeID: "n1", Registrar: rec, Events: quietEvents{},
		RegistrationTimeout: 2 * time.Second, Heartbeat: time.Second,
		Logger: hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Debug}),
	}
	if modify != nil {
		modify(&cfg)
	}
	s, err := pluginsock.Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s, rec, logs
}

// tryRegister is a plugin's whole life on the socket at path: Register,
// Subscribe, Ready, Stop. It returns the Ready's index or the first error.
func tryRegister(path, name string) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cc, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return 0, err
	}
	defer cc.Close()
	st, err := pluginrpc.NewPluginsClient(cc).Session(ctx)
	if err != nil {
		return 0, err
	}
	if err := st.Send(reg(name, "1", "")); err != nil {
		return 0, recvErr(st, err)
	}
	if _, err := st.Recv(); err != nil {
		return 0, err
	}
	if err := st.Send(subscribe); err != nil {
		return 0, recvErr(st, err)
	}
	m, err := st.Recv()
	if err != nil {
		return 0, err
	}
	if m.GetReady() == nil {
		return 0, fmt.Errorf("got %v, want Ready", m)
	}
	st.Send(stop)
	for {
		if _, err := st.Recv(); err != nil {
			break
		}
	}
	return m.GetReady().GetIndex(), nil
}

// recvErr is the status of a stream whose Send failed (Send says only
// io.EOF).
func recvErr(st pluginrpc.Plugins_SessionClient, err error) error {
	if errors.Is(err, io.EOF) {
		_, err = st.Recv()
	}
	return err
}

func statT(t *testing.T, path string) (os.FileInfo, *syscall.Stat_t) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi, fi.Sys().(*syscall.Stat_t)
}

// TestSocketOwnerAndGroup: the socket file has mode 0660 and the agent's
// owner by default, the configured owner and group (names or numbers)
// otherwise; a name that does not resolve, or an id that is not one,
// fails Listen and leaves no socket file.
func TestSocketOwnerAndGroup(t *testing.T) {
	uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
	for _, tc := range []struct {
		name         string
		owner, group string
		allow        []int
		uid, gid     uint32
		root         bool   // chowning to another user takes root
		err          string // Listen's error says this
	}{
		{name: "default", uid: uid, gid: gid},
		{name: "names", owner: "nobody", group: "nogroup", uid: 65534, gid: 65534, root: true},
		{name: "numeric owner only", owner: "65534", uid: 65534, gid: gid, root: true},
		{name: "numeric group only", group: "65534", uid: uid, gid: 65534, root: true},
		{name: "ids nobody has", owner: "4242", group: "4243", uid: 4242, gid: 4243, root: true},
		{name: "unknown owner", owner: "no-such-user-plugreg", err: `owner "no-such-user-plugreg": user: unknown user no-such-user-plugreg`},
		{name: "unknown group", group: "no-such-group-plugreg", err: `group "no-such-group-plugreg": group: unknown group no-such-group-plugreg`},
		{name: "negative owner", owner: "-1", err: `owner "-1"`},
		{name: "owner (uid_t)-1", owner: "4294967295", err: `owner "4294967295"`},
		{name: "negative allowed uid", allow: []int{0, -1}, err: "allowed uid -1 is not a uid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.root && os.Getuid() != 0 {
				t.Skip("chown to another user takes root")
			}
			dir := socketDir(t)
			path := filepath.Join(dir, "p.sock")
			s, err := pluginsock.Listen(pluginsock.Config{Path: path, NodeID: "n1", Registrar: &recorder{}, Events: quietEvents{},
				Owner: tc.owner, Group: tc.group, AllowUIDs: tc.allow})
			if tc.err != "" {
				if err == nil {
					s.Stop()
					t.Fatalf("Listen succeeded, want an error saying %q", tc.err)
				}
				if !strings.Contains(err.Error(), tc.err) || !strings.HasPrefix(err.Error(), "plugin socket "+path+": ") {
					t.Fatalf("Listen: %v, want an error on %s saying %q", err, path, tc.err)
				}
				if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("a failed Listen left %s: %v", path, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Stop()
			fi, st := statT(t, path)
			if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o660 || st.Uid != tc.uid || st.Gid != tc.gid {
				t.Fatalf("socket %v %d:%d, want a socket 0660 %d:%d", fi.Mode(), st.Uid, st.Gid, tc.uid, tc.gid)
			}
		})
	}
}

func TestParseUIDs(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
	}{
		{"0", []int{0}},
		{"0,1000, 65534", []int{0, 1000, 65534}},
		{"4294967294", []int{4294967294}},
		{"", nil},
		{"1,,2", nil},
		{"root", nil},
		{"-1", nil},
		{"4294967295", nil},
		{"1.5", nil},
	} {
		got, err := pluginsock.ParseUIDs(tc.in)
		if (err == nil) != (tc.want != nil) || !slices.Equal(got, tc.want) {
			t.Errorf("ParseUIDs(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if err != nil && !strings.Contains(err.Error(), "is not a uid") {
			t.Errorf("ParseUIDs(%q): %v, want it to say what is not a uid", tc.in, err)
		}
	}
}

// TestAllowUIDs: with AllowUIDs the test's own process registers only if
// its uid is listed; otherwise its connection is closed before gRPC sees
// it (no session, nothing written) and the refusal is logged with its uid
// and pid.
func TestAllowUIDs(t *testing.T) {
	me := os.Getuid()
	other := 65534
	if me == other {
		other = 65533
	}
	for _, tc := range []struct {
		name  string
		allow []int
		ok    bool
	}{
		{"no list", nil, true},
		{"mine", []int{me}, true},
		{"mine among others", []int{other, me, 4242}, true},
		{"another", []int{other}, false},
		{"others", []int{other, 4242}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, rec, logs := listenRecorded(t, socketDir(t), func(c *pluginsock.Config) { c.AllowUIDs = tc.allow })
			idx, err := tryRegister(s.Path(), "p1")
			st := s.Stats()
			if tc.ok {
				if err != nil || idx == 0 || len(rec.written()) != 1 || st.Refused != 0 {
					t.Fatalf("register: index %d, %v; written %v; %+v", idx, err, rec.written(), st)
				}
				return
			}
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("register: index %d, %v; want Unavailable", idx, err)
			}
			if w := rec.written(); len(w) != 0 || st.Sessions != 0 || st.Refused == 0 {
				t.Fatalf("a refused peer: written %v, %+v; want no session and the refusal counted", w, st)
			}
			if l := logs.String(); !strings.Contains(l, "uid is not allowed") || !strings.Contains(l, fmt.Sprintf("uid=%d ", me)) ||
				!strings.Contains(l, fmt.Sprintf("pid=%d", os.Getpid())) {
				t.Fatalf("log:\n%s\nwant the refusal with uid %d and pid %d", l, me, os.Getpid())
			}
		})
	}
}

// TestRefusedPeerIsClosed: a refused peer that connects and says nothing
// is closed at once, without a byte from gRPC (which would otherwise send
// its settings and wait for the peer's preface), and the socket keeps
// serving: Stop still ends it.
func TestRefusedPeerIsClosed(t *testing.T) {
	other := 65534
	if os.Getuid() == other {
		other = 65533
	}
	s, _, _ := listenRecorded(t, socketDir(t), func(c *pluginsock.Config) { c.AllowUIDs = []int{other} })
	for i := 0; i < 3; i++ {
		c, err := net.Dial("unix", s.Path())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(time.Second))
		n, err := c.Read(make([]byte, 64))
		c.Close()
		if n != 0 || !errors.Is(err, io.EOF) {
			t.Fatalf("refused peer %d: read %d bytes, %v; want it closed before anything was sent", i, n, err)
		}
	}
	if st := s.Stats(); st.Refused != 3 || st.Sessions != 0 {
		t.Fatalf("%+v, want 3 refused", st)
	}
	done := make(chan struct{})
	go func() { s.Stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Stop hangs with the uid filter")
	}
}

// helperEnv tells the test binary, started by TestAllowUIDsOtherProcess,
// to be a plugin on this socket.
const helperEnv = "PLUGSOCK_TEST_HELPER_SOCKET"

// TestHelperProcess is not a test: it is the plugin that
// TestAllowUIDsOtherProcess starts as another user. It prints one line:
// "registered INDEX" or "refused CODE".
func TestHelperProcess(t *testing.T) {
	path := os.Getenv(helperEnv)
	if path == "" {
		return
	}
	idx, err := tryRegister(path, "other")
	if err != nil {
		fmt.Printf("refused %s %d\n", status.Code(err), os.Getpid())
		return
	}
	fmt.Printf("registered %d %d\n", idx, os.Getpid())
}

// TestAllowUIDsOtherProcess: a process that really runs as another user
// (uid and gid 65534, which reaches the 0660 socket through its group) is
// let in only if its uid is listed, whatever the agent's own uid; refused,
// it is logged with its uid and pid, and the agent's own user, listed,
// registers right after it.
func TestAllowUIDsOtherProcess(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("starting a process as another user takes root")
	}
	const nobody = 65534
	dir := socketDir(t)
	// The test binary, where the other user may run it (go test's work
	// dir is 0700).
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "helper.test")
	if b, err := os.ReadFile(self); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	runHelper := func(t *testing.T, path string) (verdict string, pid int) {
		t.Helper()
		cmd := exec.Command(bin, "-test.run=^TestHelperProcess$", "-test.count=1")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), helperEnv+"="+path, "GORACE=atexit_sleep_ms=0")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 3 && (f[0] == "registered" || f[0] == "refused") {
				fmt.Sscan(f[2], &pid)
				if err != nil {
					t.Errorf("helper: %v\n%s%s", err, out, stderr.String())
				}
				return f[0] + " " + f[1], pid
			}
		}
		t.Fatalf("helper said nothing: %v\n%s%s", err, out, stderr.String())
		return "", 0
	}
	for _, tc := range []struct {
		name  string
		allow []int
		ok    bool
	}{
		{"no list", nil, true},
		{"its uid", []int{nobody}, true},
		{"root only", []int{0}, false},
		{"others", []int{0, 4242}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, rec, logs := listenRecorded(t, dir, func(c *pluginsock.Config) { c.AllowUIDs = tc.allow; c.Group = "65534" })
			verdict, pid := runHelper(t, s.Path())
			w := rec.written()
			if tc.ok {
				if verdict != "registered 1" || len(w) != 1 || w[0].Name != "other" {
					t.Fatalf("helper %s; written %v; want it registered", verdict, w)
				}
				return
			}
			if verdict != "refused Unavailable" || len(w) != 0 || s.Stats().Sessions != 0 {
				t.Fatalf("helper %s; written %v; %+v; want it refused before a session", verdict, w, s.Stats())
			}
			if l := logs.String(); !strings.Contains(l, "uid is not allowed") || !strings.Contains(l, fmt.Sprintf("uid=%d gid=%d pid=%d", nobody, nobody, pid)) {
				t.Fatalf("log:\n%s\nwant the refusal with uid %d and pid %d", l, nobody, pid)
			}
			if idx, err := tryRegister(s.Path(), "mine"); err != nil || idx != 1 {
				t.Fatalf("root, allowed, after the refusal: %d %v", idx, err)
			}
		})
	}
	// A plugin in its grace period (its process gone without stopping)
	// is reclaimed without its token only by its own user: another
	// user's process could otherwise take over its identity, then stop
	// it or move its endpoint. Its own user's next process reclaims it.
	t.Run("another user, a plugin in grace", func(t *testing.T) {
		s, _, _ := listenRecorded(t, dir, func(c *pluginsock.Config) { c.Group = "65534" })
		dropAfterRegister(t, s.Path(), "other")
		if verdict, _ := runHelper(t, s.Path()); verdict != "refused PermissionDenied" {
			t.Fatalf("another user's process, without the token: %s; want refused", verdict)
		}
		if _, err := tryRegister(s.Path(), "other"); err != nil {
			t.Fatalf("its own user, without the token: %v; want it reclaimed", err)
		}
	})
}

// dropAfterRegister registers name and drops the connection without a
// Stop, as a plugin that died does: the agent keeps it for its grace.
func dropAfterRegister(t *testing.T, path, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cc, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	st, err := pluginrpc.NewPluginsClient(cc).Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*pb.PluginMessage{reg(name, "1", ""), subscribe} {
		if err := st.Send(m); err != nil {
			t.Fatal(recvErr(st, err))
		}
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
	}
}
