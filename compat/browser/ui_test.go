package browser

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/client"
	"github.com/plugreg/plugreg/tests/framework/proctest"
)

func TestMain(m *testing.M) { proctest.Main(m) }

// browser starts headless chromium (Debian's) for the test, or skips when
// there is none, unless PLUGREG_REQUIRE_BROWSER is set (CI sets it: there
// a missing browser is a failure, not a skip).
func browser(t *testing.T) context.Context {
	t.Helper()
	var path string
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		if os.Getenv("PLUGREG_REQUIRE_BROWSER") != "" {
			t.Fatal("no chromium in PATH (apt-get install chromium)")
		}
		t.Skip("no chromium in PATH; set PLUGREG_REQUIRE_BROWSER to make this a failure")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // root in CI
		chromedp.DisableGPU,
		chromedp.WindowSize(1400, 1000),
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	return ctx
}

func plugin(typ, name, alloc, node string) *api.PluginInfo {
	return &api.PluginInfo{Type: typ, Name: name, AllocID: alloc, NodeID: node, Version: "1.2." + alloc[len(alloc)-1:],
		ConnectionInfo: &api.ConnectionInfo{SocketPath: fmt.Sprintf("/var/lib/kubelet/plugins/%s/%s.sock", name, alloc)}}
}

// waitFor polls a JavaScript expression in the page until it is true.
func waitFor(ctx context.Context, t *testing.T, what, expr string) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := chromedp.Run(wctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(100*time.Millisecond))); err != nil {
		page, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("waiting for %s (%s): %v\npage:\n%s", what, expr, err, page)
	}
}

func count(ctx context.Context, t *testing.T, selector string) int {
	t.Helper()
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, selector)))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// The UI of a real three-server cluster and a client agent, in a real
// browser: it lists the members with one leader and their health, the
// registered plugins, a name's recency list, each type's coverage (which
// live nodes have it, which lack it); a plugin registered through the API
// appears without a reload, with its event in the live view; a search
// narrows the list; a deregistered plugin disappears.
func TestUIShowsClusterAndLiveChanges(t *testing.T) {
	ctx := browser(t)
	c := proctest.StartCluster(t, proctest.ClusterConfig{})
	c.StartClient(t, "host-1", "127.0.0.1", "-plugin-socket", "off")
	c.WaitReady(t)
	reg := c.Servers[1].API
	actx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, p := range []*api.PluginInfo{
		plugin("csi", "ebs.csi.aws.com", "a1", "host-1"), plugin("csi", "ebs.csi.aws.com", "a2", "host-2"),
		plugin("csi", "efs.csi.aws.com", "e1", "host-1"), plugin("device", "nvidia.com-gpu", "g1", "host-2"),
	} {
		if _, err := reg.Register(actx, p); err != nil {
			t.Fatal(err)
		}
	}

	url := "http://" + c.Servers[0].HTTP + "/ui/"
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	waitFor(ctx, t, "three servers, one leader, all healthy, and the client agent",
		`document.querySelectorAll('#members tr[data-raft="leader"]').length === 1 &&
		 document.querySelectorAll('#members tr[data-raft="follower"]').length === 2 &&
		 !!document.querySelector('#members tr[data-node="host-1"]') &&
		 document.querySelector('#cluster-health').textContent.startsWith('healthy')`)
	waitFor(ctx, t, "the registered plugins",
		`!!document.querySelector('#plugins tr.name-row[data-type="csi"][data-name="ebs.csi.aws.com"]') &&
		 !!document.querySelector('#plugins tr.name-row[data-type="device"][data-name="nvidia.com-gpu"]')`)
	waitFor(ctx, t, "the live stream", `document.querySelector('#stream-state').textContent === 'live'`)
	// Coverage: host-1 (a live client agent) runs csi, the servers do
	// not, host-2 is no member (registered through the API): orphaned.
	waitFor(ctx, t, "csi's coverage",
		`(() => { const cell = (s) => (document.querySelector('#coverage tr[data-type="csi"] td[data-state="' + s + '"]') || {}).textContent;
		          return cell('covered') === '1: host-1' && cell('missing') === '3: server-1, server-2, server-3' &&
		                 cell('suspect') === '0' && cell('orphaned') === '1: host-2'; })()`)
	loadedAt, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`window.plugregLoadedAt`))
	if err != nil || loadedAt == 0 {
		t.Fatalf("plugregLoadedAt: %v %v", loadedAt, err)
	}

	// A name's recency list, newest first.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#plugins tr.name-row[data-name="ebs.csi.aws.com"]`))); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "ebs's two instances, newest first",
		`(() => { const r = [...document.querySelectorAll('#plugins tr.instance-row[data-name="ebs.csi.aws.com"]')].map(e => e.dataset.alloc);
		          return r.length === 2 && r[0] === 'a2' && r[1] === 'a1'; })()`)

	// Registered through the API (another server): in the page, and in
	// the event view, without a reload.
	if _, err := reg.Register(actx, plugin("dra", "gpu.example.com", "d1", "host-1")); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "the new plugin without a reload",
		`!!document.querySelector('#plugins tr.name-row[data-type="dra"][data-name="gpu.example.com"]') &&
		 !!document.querySelector('#events tr[data-event="registered"][data-name="gpu.example.com"]')`)
	// A new instance of an expanded name joins its list at the top.
	if _, err := c.Servers[2].API.Register(actx, plugin("csi", "ebs.csi.aws.com", "a3", "host-1")); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "a3 at the top of ebs's list",
		`(() => { const r = [...document.querySelectorAll('#plugins tr.instance-row[data-name="ebs.csi.aws.com"]')].map(e => e.dataset.alloc);
		          return r.length === 3 && r[0] === 'a3'; })()`)
	// An external checker marks the oldest instance suspect: it says so
	// in its row, keeps its place, and the change is a health event.
	sick := plugin("csi", "ebs.csi.aws.com", "a1", "host-1")
	sick.Health = &api.InstanceHealth{Status: "suspect", Check: "external", Reason: "no answer", LastSeen: time.Now().UTC()}
	if _, err := reg.Register(actx, sick); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "a1 suspect, still last, with a health event",
		`(() => { const r = [...document.querySelectorAll('#plugins tr.instance-row[data-name="ebs.csi.aws.com"]')];
		          const last = r[r.length-1];
		          return r.length === 3 && last.dataset.alloc === 'a1' && last.querySelector('td.health.suspect') &&
		            last.querySelector('td.health.suspect').textContent === 'suspect (external)' &&
		            r[0].querySelector('td.health.passing') &&
		            !!document.querySelector('#events tr[data-event="health"][data-name="ebs.csi.aws.com"]'); })()`)

	// Search and filters.
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS(`#filter`), "nvidia")); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "only the gpu row", `document.querySelectorAll('#plugins tr.name-row').length === 1`)
	setFilters := func(text, typ string) {
		t.Helper()
		js := fmt.Sprintf(`(() => { document.querySelector('#filter').value = %q; const s = document.querySelector('#filter-type');
			s.value = %q; s.dispatchEvent(new Event('input')); return s.value === %q; })()`, text, typ, typ)
		if ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js)); err != nil || !ok {
			t.Fatalf("set the filters to %q, %q: %v %v", text, typ, ok, err)
		}
	}
	setFilters("", "csi")
	waitFor(ctx, t, "only csi rows", `[...document.querySelectorAll('#plugins tr.name-row')].every(r => r.dataset.type === 'csi') &&
		document.querySelectorAll('#plugins tr.name-row').length === 2`)
	setFilters("", "")

	// Deregistered: gone from the page, its event shown.
	if _, err := reg.Deregister(actx, "device", "nvidia.com-gpu", "g1"); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "the deregistered plugin gone",
		`!document.querySelector('#plugins tr.name-row[data-name="nvidia.com-gpu"]') &&
		 !!document.querySelector('#events tr[data-event="deregistered"][data-name="nvidia.com-gpu"]')`)

	after, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`window.plugregLoadedAt`))
	if err != nil || after != loadedAt {
		t.Fatalf("the page was reloaded (%v then %v): %v", loadedAt, after, err)
	}
	if n := count(ctx, t, `#plugins tr.name-row`); n != 3 {
		t.Fatalf("%d names, want 3", n)
	}

	if path := os.Getenv("PLUGREG_UI_SCREENSHOT"); path != "" {
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Under ACLs with default deny the page asks for a token, and with one
// shows the registry.
func TestUIWithACLToken(t *testing.T) {
	ctx := browser(t)
	c := proctest.StartCluster(t, proctest.ClusterConfig{ServerArgs: []string{"-acl-enabled", "-acl-default-policy", "deny"}})
	c.Poll(t, "a leader", func() (bool, string) {
		actx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		l, err := c.Servers[0].API.Leader(actx)
		return err == nil && l != "", fmt.Sprint(l, err)
	})
	actx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	boot, err := c.Servers[0].API.ACLBootstrap(actx)
	if err != nil {
		t.Fatal(err)
	}
	root, _ := client.New(client.Config{Addrs: []string{c.Servers[0].HTTP}, Token: boot.SecretID})
	if _, err := root.Register(actx, plugin("csi", "secret.csi.example.com", "s1", "host-1")); err != nil {
		t.Fatal(err)
	}
	read, err := root.ACLTokenCreate(actx, "ui", []api.ACLPolicy{{Kind: "read"}})
	if err != nil {
		t.Fatal(err)
	}

	// The page on the node the tokens were made through: a token is
	// there as soon as its creation is acknowledged.
	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+c.Servers[0].HTTP+"/ui/")); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "the permission message", `!document.querySelector('#banner').hidden && document.querySelector('#banner').textContent.includes('Permission denied')`)
	if n := count(ctx, t, `#plugins tr.name-row`); n != 0 {
		t.Fatalf("%d plugins shown without a token", n)
	}
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS(`#token`), read.SecretID), chromedp.Click(chromedp.CSS(`#token-form button[type=submit]`))); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "the plugins with the read token",
		`!!document.querySelector('#plugins tr.name-row[data-name="secret.csi.example.com"]') && document.querySelector('#banner').hidden &&
		 document.querySelector('#stream-state').textContent === 'live'`)
	// Live with the token too.
	if _, err := root.Register(actx, plugin("csi", "later.csi.example.com", "l1", "host-1")); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "a later plugin, live", `!!document.querySelector('#plugins tr.name-row[data-name="later.csi.example.com"]')`)
	// The token is kept in this browser only, never in the page's URL.
	href, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href`))
	if strings.Contains(href, read.SecretID) {
		t.Fatal("the token is in the URL")
	}
}
