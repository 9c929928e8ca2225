package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plugreg/plugreg/agentrpc"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/tests/framework/proctest"
	"github.com/plugreg/plugreg/transport"
)

// attack is one thing a hostile caller tries; try returns nil when it was
// refused as docs/security.md says.
type attack struct {
	who, what string
	try       func() error
}

// hostile is what the attacks of TestHostileSuite reach: the cluster,
// its tokens, and the positions the attacker holds.
type hostile struct {
	t          *testing.T
	ctx        context.Context
	c          *proctest.Cluster
	addrs      []string // the servers' HTTPS addresses
	raftAddrs  []string
	h1, h2     *proctest.Agent
	tok1, tok2 string // the hosts' agent tokens
	op         *client.Client
	cliTLS     *tls.Config
	rpc        *transport.Pool
	as         func(addrs []string, token string) *client.Client
	plugin     func(node, alloc string) *api.PluginInfo
	probe      string // host-2's -probe-port address
}

// peakRSS is a process's peak resident memory (VmHWM), in bytes.
func peakRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}

// cpuTime is the CPU a process has used (user and system).
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command's closing parenthesis: utime and stime
	// are the 12th and 13th of them, in clock ticks (100 a second on Linux).
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	u, _ := strconv.ParseInt(fields[11], 10, 64)
	s, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond, nil
}

// costOf runs fn and returns how much each of procs' peak memory and CPU
// grew meanwhile (the largest of each).
func costOf(procs []*proctest.Agent, fn func() error) (mem int64, cpu time.Duration, err error) {
	peak0, cpu0 := make([]int64, len(procs)), make([]time.Duration, len(procs))
	for i, p := range procs {
		peak0[i], _ = peakRSS(p.Pid())
		cpu0[i], _ = cpuTime(p.Pid())
	}
	err = fn()
	for i, p := range procs {
		peak, _ := peakRSS(p.Pid())
		used, _ := cpuTime(p.Pid())
		mem, cpu = max(mem, peak-peak0[i]), max(cpu, used-cpu0[i])
	}
	return mem, cpu, err
}

// bounded fails when an attack's cost grew past what a refusal may cost,
// and logs it otherwise.
func (h *hostile) bounded(what string, mem int64, cpu time.Duration, maxMem int64, maxCPU time.Duration) error {
	if mem > maxMem || cpu > maxCPU {
		return fmt.Errorf("%s cost %d MiB of peak memory and %v of CPU (bounds %d MiB, %v)", what, mem>>20, cpu, maxMem>>20, maxCPU)
	}
	h.t.Logf("%s cost %.1f MiB of peak memory and %v of CPU", what, float64(mem)/(1<<20), cpu)
	return nil
}

// zeros is a body of n zero bytes made as it is read, counting what was.
type zeros struct {
	n, read int64
}

func (z *zeros) Read(p []byte) (int, error) {
	if z.read >= z.n {
		return 0, io.EOF
	}
	k := min(int64(len(p)), z.n-z.read)
	clear(p[:k])
	atomic.AddInt64(&z.read, k)
	return int(k), nil
}

// round3 are the attacks of security round 3 (issue 37).
func (h *hostile) round3() []attack {
	servers := h.c.Servers
	return []attack{
		{"host-1's agent token", "take host-2's instance over by registering it for host-1, through host-1's agent", func() error {
			_, err := h.as([]string{h.h1.HTTP}, h.tok1).Register(h.ctx, h.plugin("host-1", "b1"))
			return isErr(err, api.ErrConflict)
		}},
		{"host-1's agent token", "take host-2's instance over at a server", func() error {
			_, err := h.as(h.addrs, h.tok1).Register(h.ctx, h.plugin("host-1", "b1"))
			return isErr(err, api.ErrConflict)
		}},
		{"anyone", "make an agent read a 300 MiB snapshot without a token", func() error {
			body := &zeros{n: 300 << 20}
			mem, cpu, err := costOf(servers[:1], func() error {
				req, _ := http.NewRequestWithContext(h.ctx, http.MethodPut, "https://"+h.addrs[0]+"/v1/operator/snapshot", body)
				req.ContentLength = body.n
				hc := &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: h.cliTLS.Clone()}}
				resp, err := hc.Do(req)
				if err != nil {
					return nil // refused by closing the connection: the bytes sent tell
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusForbidden {
					return fmt.Errorf("status %d, want 403", resp.StatusCode)
				}
				return nil
			})
			if err != nil {
				return err
			}
			if sent := atomic.LoadInt64(&body.read); sent > 32<<20 {
				return fmt.Errorf("the agent took %d MiB of the body before refusing it", sent>>20)
			}
			return h.bounded("the refusal", mem, cpu, 64<<20, 5*time.Second)
		}},
		{"client certificate", "make a server decode a 300 MiB snapshot without a token", func() error {
			args := &agentrpc.SnapshotRestoreArgs{Archive: make([]byte, 300<<20)}
			mem, cpu, err := costOf(servers, func() error {
				for _, addr := range h.raftAddrs {
					var reply interface{}
					err := h.rpc.Call(h.ctx, addr, agentrpc.SnapshotRestore, args, &reply)
					var re *api.WireError
					if errors.As(err, &re) && re.Code != api.CodePermissionDenied {
						return fmt.Errorf("%s: %v, want permission_denied", addr, err)
					}
					if err == nil {
						return fmt.Errorf("%s restored it", addr)
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
			return h.bounded("three refusals", mem, cpu, 100<<20, 10*time.Second)
		}},
		{"host-2's agent token", "reuse another caller's request ID to be answered with its result", func() error {
			w, err := h.op.ACLTokenCreate(h.ctx, "writer", []api.ACLPolicy{{Kind: api.ACLWrite, Types: []string{"csi"}}})
			if err != nil {
				return err
			}
			defer h.op.ACLTokenDelete(h.ctx, w.AccessorID)
			rid := client.WithRequestID(h.ctx, "round3-shared-id")
			first, err := h.as(h.addrs, w.SecretID).Register(rid, h.plugin("host-9", "w1"))
			if err != nil {
				return fmt.Errorf("the writer's own registration: %v", err)
			}
			defer h.op.Deregister(h.ctx, "csi", "ebs", "w1")
			second, err := h.as([]string{h.h2.HTTP}, h.tok2).Register(rid, h.plugin("host-2", "b3"))
			if err != nil {
				return fmt.Errorf("host-2's registration: %v", err)
			}
			defer h.op.Deregister(h.ctx, "csi", "ebs", "b3")
			if _, _, err := h.op.Get(h.ctx, "csi", "ebs", "b3", nil); err != nil {
				return fmt.Errorf("host-2's write was answered with the writer's (index %d, then %d) and never applied: %v", first.Index, second.Index, err)
			}
			return nil
		}},
		{"a read token", "make the servers compile a 2 KB pattern of 1.9 million instructions", func() error {
			return h.costlyFilter(fmt.Sprintf("Options.x matches %q", alternation(633)+"{1000}"), "at most")
		}},
		{"a read token", "make the servers run eight near-limit patterns over 5 KB values", func() error {
			heavy := strings.TrimSuffix(strings.Repeat(`Options.x matches "^zzz[a-z]{990}[0-9]{990}" or `, 8), " or ")
			return h.costlyFilter(heavy, "work budget exceeded")
		}},
		{"anyone", "hold 1,000 idle connections to a client agent's probe port", h.crowdProbe},
		{"a deleted read token", "keep its open event streams (at a server and a client agent)", h.streamsOutliveToken},
		{"a write token", "register names that paths cannot reach (. and ..)", func() error {
			for _, name := range []string{".", ".."} {
				p := h.plugin("host-9", "d1")
				p.Name = name
				if _, err := h.op.Register(h.ctx, p); !errors.Is(err, api.ErrInvalid) {
					h.op.Deregister(h.ctx, "csi", name, "d1")
					return fmt.Errorf("name %q: %v, want invalid", name, err)
				}
			}
			return nil
		}},
	}
}

// alternation is (?:aa|ba|...) of n two-letter words: a pattern whose
// repetition compiles to about three instructions a word.
func alternation(n int) string {
	words := make([]string, n)
	for i := range words {
		words[i] = fmt.Sprintf("%c%c", 'a'+i%26, 'a'+(i/26)%26)
	}
	return "(?:" + strings.Join(words, "|") + ")"
}

// costlyFilter lists csi plugins, among them instances with a 5 KB
// option, with expr through a read token at every server: the answer must
// be a 400 saying want, at a bounded cost.
func (h *hostile) costlyFilter(expr, want string) error {
	for i := range 4 {
		p := h.plugin("host-9", fmt.Sprintf("long%d", i))
		p.Options = map[string]string{"x": strings.Repeat("ab", 2500)}
		if _, err := h.op.Register(h.ctx, p); err != nil {
			return err
		}
		defer h.op.Deregister(h.ctx, "csi", "ebs", p.AllocID)
	}
	r, err := h.op.ACLTokenCreate(h.ctx, "reader", []api.ACLPolicy{{Kind: api.ACLRead, Types: []string{"csi"}}})
	if err != nil {
		return err
	}
	defer h.op.ACLTokenDelete(h.ctx, r.AccessorID)
	mem, cpu, err := costOf(h.c.Servers, func() error {
		for _, addr := range h.addrs {
			_, _, err := h.as([]string{addr}, r.SecretID).List(h.ctx, "csi", &client.QueryOptions{Filter: expr, Stale: true})
			if !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), want) {
				return fmt.Errorf("%s answered %v, want a 400 saying %q", addr, err, want)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return h.bounded("three refusals", mem, cpu, 64<<20, 5*time.Second)
}

// streamsOutliveToken opens event streams with a read token at a follower
// and at host-1's agent, deletes the token, and wants each stream ended
// with the refusal as its last event (a client agent learns of the
// deletion through its token cache: about 12 s).
func (h *hostile) streamsOutliveToken() error {
	r, err := h.op.ACLTokenCreate(h.ctx, "reader", []api.ACLPolicy{{Kind: api.ACLRead, Types: []string{"csi"}}})
	if err != nil {
		return err
	}
	deleted := false
	defer func() {
		if !deleted {
			h.op.ACLTokenDelete(h.ctx, r.AccessorID)
		}
	}()
	ctx, cancel := context.WithTimeout(h.ctx, time.Minute)
	defer cancel()
	ends := make(chan error, 2)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: h.cliTLS.Clone()}}
	opened := make(chan error, 2)
	for _, addr := range []string{h.addrs[1], h.h1.HTTP} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/v1/events?type=csi", nil)
		req.Header.Set("X-Plugreg-Token", r.SecretID)
		resp, err := hc.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			return fmt.Errorf("open a stream at %s: %v %v", addr, err, resp)
		}
		go func() {
			defer resp.Body.Close()
			opened <- nil
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(nil, 1<<20)
			last := ""
			for sc.Scan() {
				last = sc.Text()
			}
			if !strings.Contains(last, `"EventType":"error"`) || !strings.Contains(last, api.CodeACLNotFound) {
				ends <- fmt.Errorf("the stream at %s went on or ended without the refusal (last line %.200q, %v)", addr, last, sc.Err())
				return
			}
			ends <- nil
		}()
	}
	<-opened
	<-opened
	if _, err := h.op.ACLTokenDelete(h.ctx, r.AccessorID); err != nil {
		return err
	}
	deleted = true
	return errors.Join(<-ends, <-ends)
}

// crowdProbe opens 1,000 connections from one address to host-2's probe
// port (plain HTTP, no token, served on every pod IP by the chart) and
// asks each for /v1/health: at most -http-max-conns-per-client (200) may
// be held, those held are closed once idle, and the probe still answers
// another address meanwhile.
func (h *hostile) crowdProbe() error {
	const attempts, perClient = 1000, 200
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range attempts {
		conn, err := net.DialTimeout("tcp", h.probe, 5*time.Second)
		if err != nil {
			return fmt.Errorf("dial after %d connections: %v", len(conns), err)
		}
		conns = append(conns, conn)
	}
	var held []*bufio.Reader
	var heldConns []net.Conn
	for _, conn := range conns {
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(conn, "GET /v1/health HTTP/1.1\r\nHost: %s\r\n\r\n", h.probe)
		br := bufio.NewReader(conn)
		if resp, err := http.ReadResponse(br, nil); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				held, heldConns = append(held, br), append(heldConns, conn)
			}
		}
	}
	if len(held) > perClient {
		return fmt.Errorf("the probe port held %d connections from one address, more than %d", len(held), perClient)
	}
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 5 * time.Second}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: d.DialContext}}
	resp, err := hc.Get("http://" + h.probe + "/v1/health")
	if err != nil {
		return fmt.Errorf("the probe, from another address: %v", err)
	}
	resp.Body.Close()
	for i, br := range held {
		heldConns[i].SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := br.ReadByte(); err != io.EOF {
			return fmt.Errorf("held connection %d, idle: %v, want it closed by the agent", i, err)
		}
	}
	return nil
}

// defaultAgentAttacks run against an agent started with no security flag
// at all, the default a user gets: a web page the user visits may still
// change nothing (DNS rebinding).
func defaultAgentAttacks(ctx context.Context, t *testing.T, bin string) []attack {
	dir := t.TempDir()
	p := proctest.FreePorts(t, "127.0.0.1", 3)
	httpAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p[0]))
	a := proctest.New("default-agent", bin, filepath.Join(dir, "agent.log"), "agent", "-node", "solo",
		"-data-dir", filepath.Join(dir, "data"), "-bind", "127.0.0.1", "-http-port", strconv.Itoa(p[0]),
		"-server-port", strconv.Itoa(p[1]), "-gossip-port", strconv.Itoa(p[2]), "-bootstrap-expect", "1")
	a.Start(t)
	t.Cleanup(func() { a.Stop(t) })
	local, err := client.New(client.Config{Addrs: []string{httpAddr}})
	if err != nil {
		t.Fatal(err)
	}
	proctest.Poll(t, proctest.Wait, "the default agent leading", []*proctest.Proc{a}, func() (bool, string) {
		_, err := local.Register(ctx, &api.PluginInfo{Type: "csi", Name: "ebs", AllocID: "a1", ConnectionInfo: &api.ConnectionInfo{SocketPath: "/s"}})
		return err == nil, fmt.Sprint(err)
	})
	// The page at rebind.attacker.example resolves its own name to
	// 127.0.0.1 after loading: its requests are same-origin to the browser.
	rebound := func(method, path, body string) error {
		req, _ := http.NewRequestWithContext(ctx, method, "http://"+httpAddr+path, strings.NewReader(body))
		req.Host = "rebind.attacker.example:" + strconv.Itoa(p[0])
		req.Header.Set("Origin", "http://"+req.Host)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		line, _ := bufio.NewReader(resp.Body).ReadString('\n')
		if resp.StatusCode < 400 {
			return fmt.Errorf("%s %s answered %d: %.120s", method, path, resp.StatusCode, line)
		}
		return nil
	}
	return []attack{
		{"a web page (DNS rebinding)", "register on a default agent", func() error {
			return rebound("POST", "/v1/plugins", `{"Type":"csi","Name":"ebs","AllocID":"evil","ConnectionInfo":{"SocketPath":"/s"}}`)
		}},
		{"a web page (DNS rebinding)", "read a default agent's plugins", func() error {
			return rebound("GET", "/v1/plugins/csi", "")
		}},
		{"a web page (DNS rebinding)", "deregister on a default agent", func() error {
			return rebound("DELETE", "/v1/plugins/csi/ebs/a1", "")
		}},
	}
}

func isErr(err, want error) error {
	if !errors.Is(err, want) {
		return fmt.Errorf("%v, want %v", err, want)
	}
	return nil
}
