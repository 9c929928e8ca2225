package gossip

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func mustKey(t *testing.T) string {
	t.Helper()
	k, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestOpenKeyring(t *testing.T) {
	k1, k2 := mustKey(t), mustKey(t)
	t.Run("neither file nor flag: no encryption", func(t *testing.T) {
		kr, _, err := OpenKeyring(filepath.Join(t.TempDir(), KeyringFileName), "")
		if err != nil || kr != nil {
			t.Fatalf("got %v, %v; want nil, nil", kr, err)
		}
	})
	t.Run("flag writes the file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), KeyringFileName)
		kr, ignored, err := OpenKeyring(path, k1)
		if err != nil || kr == nil || ignored {
			t.Fatalf("got %v, %v, %v", kr, ignored, err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("mode %v, want 0600", fi.Mode().Perm())
		}
		var keys []string
		b, _ := os.ReadFile(path)
		if err := json.Unmarshal(b, &keys); err != nil || len(keys) != 1 || keys[0] != k1 {
			t.Fatalf("file holds %s (%v)", b, err)
		}
	})
	t.Run("the file wins over the flag", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), KeyringFileName)
		if _, _, err := OpenKeyring(path, k1); err != nil {
			t.Fatal(err)
		}
		kr, ignored, err := OpenKeyring(path, k2)
		if err != nil || !ignored {
			t.Fatalf("ignored %v, err %v; want the flag ignored", ignored, err)
		}
		if got := kr.Status().PrimaryKey; got != k1 {
			t.Fatalf("primary %s, want the file's", got)
		}
		if _, ignored, _ := OpenKeyring(path, k1); ignored {
			t.Fatal("the file's own primary key reported as ignored")
		}
	})
	t.Run("changes survive a reopen", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), KeyringFileName)
		kr, _, err := OpenKeyring(path, k1)
		if err != nil {
			t.Fatal(err)
		}
		if err := kr.Install(k2); err != nil {
			t.Fatal(err)
		}
		if err := kr.Use(k2); err != nil {
			t.Fatal(err)
		}
		if err := kr.Remove(k1); err != nil {
			t.Fatal(err)
		}
		again, _, err := OpenKeyring(path, "")
		if err != nil {
			t.Fatal(err)
		}
		if st := again.Status(); st.PrimaryKey != k2 || len(st.Keys) != 1 {
			t.Fatalf("reopened: %+v, want only the second key", st)
		}
	})
	bad := []struct {
		name, file, flag, want string
	}{
		{"flag not base64", "", "not base64!", "not valid base64"},
		{"flag of the wrong size", "", "c2hvcnQ=", "must have 16, 24 or 32"},
		{"file not JSON", "{", "", "not a JSON list"},
		{"file with no key", "[]", "", "holds no key"},
		{"file with a bad key", `["c2hvcnQ="]`, "", "key 0"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), KeyringFileName)
			if tc.file != "" {
				if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			_, _, err := OpenKeyring(path, tc.flag)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one saying %q", err, tc.want)
			}
			if tc.flag != "" && strings.Contains(err.Error(), tc.flag) {
				t.Fatalf("the error quotes the key: %v", err)
			}
			if tc.file == "" {
				if _, err := os.Stat(path); !os.IsNotExist(err) {
					t.Fatal("a refused -encrypt left a keyring file")
				}
			}
		})
	}
}

func TestKeyringRefusals(t *testing.T) {
	k1, k2 := mustKey(t), mustKey(t)
	kr, err := memoryKeyring(k1)
	if err != nil {
		t.Fatal(err)
	}
	if err := kr.Use(k2); err == nil || !strings.Contains(err.Error(), "not installed") {
		t.Fatalf("use of a key not installed: %v", err)
	}
	if err := kr.Remove(k1); err == nil || !strings.Contains(err.Error(), "primary") {
		t.Fatalf("removing the primary key: %v", err)
	}
	if err := kr.Install("AAAA"); err == nil {
		t.Fatal("a 3-byte key installed")
	}
	if st := kr.Status(); len(st.Keys) != 1 || st.PrimaryKey != k1 {
		t.Fatalf("refusals changed the keyring: %+v", st)
	}
	if err := kr.Remove(k2); err != nil {
		t.Fatalf("removing a key not installed (a retried rotation step): %v", err)
	}
}

// startEncrypted starts a pool with kr (nil: plaintext) and stops it at
// the test's end.
func startEncrypted(t *testing.T, name string, kr *Keyring) *Pool {
	t.Helper()
	p, err := Start(Config{NodeID: name, BindAddr: "127.0.0.1", Fast: true, Encryption: Encryption{Keyring: kr},
		Meta: Meta{ID: name, Role: "server"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Shutdown() })
	return p
}

func aliveNames(p *Pool) map[string]bool {
	alive := map[string]bool{}
	for _, m := range p.Members() {
		if m.Status == StatusAlive {
			alive[m.Name] = true
		}
	}
	return alive
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A node with a wrong key, or none, does not join an encrypted pool, and
// an encrypted node does not join a plaintext one.
func TestWrongOrMissingKeyDoesNotJoin(t *testing.T) {
	key := mustKey(t)
	ring := func(k string) *Keyring {
		kr, err := memoryKeyring(k)
		if err != nil {
			t.Fatal(err)
		}
		return kr
	}
	a := startEncrypted(t, "a", ring(key))
	b := startEncrypted(t, "b", ring(key))
	if _, err := b.Join([]string{a.Addr()}); err != nil {
		t.Fatalf("same key: %v", err)
	}
	waitUntil(t, "a and b to see each other", func() bool { return aliveNames(a)["b"] && aliveNames(b)["a"] })

	wrong := startEncrypted(t, "wrong", ring(mustKey(t)))
	none := startEncrypted(t, "none", nil)
	for _, intruder := range []*Pool{wrong, none} {
		if _, err := intruder.Join([]string{a.Addr()}); err == nil {
			t.Errorf("%s joined an encrypted pool", intruder.cfg.NodeID)
		}
	}
	plainA := startEncrypted(t, "plain-a", nil)
	if _, err := b.Join([]string{plainA.Addr()}); err == nil {
		t.Error("an encrypted node joined a plaintext pool")
	}
	// Give gossip some rounds: nobody may have heard of anyone across keys.
	time.Sleep(2 * time.Second)
	for _, p := range []*Pool{a, b} {
		for name := range aliveNames(p) {
			if name != "a" && name != "b" {
				t.Errorf("%s lists %s", p.cfg.NodeID, name)
			}
		}
	}
	for _, p := range []*Pool{wrong, none, plainA} {
		if got := aliveNames(p); len(got) != 1 {
			t.Errorf("%s lists %v", p.cfg.NodeID, got)
		}
	}
}

// Rotation as an operator does it (install everywhere, use everywhere,
// remove the old key everywhere) keeps every member alive throughout, and
// afterwards only the new key joins.
func TestKeyRotationWithoutDowntime(t *testing.T) {
	oldKey, newKey := mustKey(t), mustKey(t)
	var pools []*Pool
	for _, name := range []string{"a", "b", "c"} {
		kr, err := memoryKeyring(oldKey)
		if err != nil {
			t.Fatal(err)
		}
		p := startEncrypted(t, name, kr)
		if len(pools) > 0 {
			if _, err := p.Join([]string{pools[0].Addr()}); err != nil {
				t.Fatal(err)
			}
		}
		pools = append(pools, p)
	}
	allAlive := func() bool {
		for _, p := range pools {
			if len(aliveNames(p)) != 3 {
				return false
			}
		}
		return true
	}
	waitUntil(t, "three members alive everywhere", allAlive)

	// Watch for any member leaving the alive state while keys change.
	stop := make(chan struct{})
	flapped := make(chan string, 16)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			for _, p := range pools {
				for _, m := range p.Members() {
					if m.Status != StatusAlive {
						select {
						case flapped <- p.cfg.NodeID + " saw " + m.Name + " " + string(m.Status):
						default:
						}
					}
				}
			}
		}
	}()
	steps := []struct {
		name string
		do   func(*Keyring) error
	}{
		{"install", func(k *Keyring) error { return k.Install(newKey) }},
		{"use", func(k *Keyring) error { return k.Use(newKey) }},
		{"remove", func(k *Keyring) error { return k.Remove(oldKey) }},
	}
	for _, step := range steps {
		for _, p := range pools {
			if err := step.do(p.Keyring()); err != nil {
				t.Fatalf("%s on %s: %v", step.name, p.cfg.NodeID, err)
			}
			time.Sleep(300 * time.Millisecond) // let gossip run between agents
		}
	}
	time.Sleep(time.Second)
	close(stop)
	select {
	case f := <-flapped:
		t.Fatalf("a member was not alive during the rotation: %s", f)
	default:
	}
	for _, p := range pools {
		if st := p.Keyring().Status(); st.PrimaryKey != newKey || len(st.Keys) != 1 {
			t.Fatalf("%s holds %d keys after the rotation", p.cfg.NodeID, len(st.Keys))
		}
	}
	oldRing, _ := memoryKeyring(oldKey)
	stale := startEncrypted(t, "stale", oldRing)
	if _, err := stale.Join([]string{pools[1].Addr()}); err == nil {
		t.Error("a node with the removed key joined")
	}
	newRing, _ := memoryKeyring(newKey)
	fresh := startEncrypted(t, "fresh", newRing)
	if _, err := fresh.Join([]string{pools[2].Addr()}); err != nil {
		t.Fatalf("a node with the new key: %v", err)
	}
	// 60 s, and every view on failure: once in a CI run under full load
	// one pool had not seen the new node alive within 20 s.
	deadline := time.Now().Add(60 * time.Second)
	for {
		var views []string
		seen := 0
		for _, p := range pools {
			if aliveNames(p)["fresh"] {
				seen++
			}
			var ms []string
			for _, m := range p.Members() {
				ms = append(ms, m.Name+"="+string(m.Status))
			}
			views = append(views, fmt.Sprintf("%s sees %v", p.cfg.NodeID, ms))
		}
		if seen == len(pools) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new node not seen alive by every pool within 60 s: %s", strings.Join(views, "; "))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Turning encryption on in a running pool, as docs/security.md says:
// every member restarted in turn with the key accepting and sending
// plaintext, then sending encrypted, then refusing plaintext. Each
// restarted member rejoins and the pool stays whole at every stage; at the
// end a plaintext node cannot join.
func TestEnablingEncryptionInARunningPool(t *testing.T) {
	key := mustKey(t)
	names := []string{"a", "b", "c"}
	pools := make([]*Pool, len(names))
	start := func(i int, port int, enc Encryption) {
		t.Helper()
		p, err := Start(Config{NodeID: names[i], BindAddr: "127.0.0.1", Port: port, Fast: true, Encryption: enc,
			Meta: Meta{ID: names[i], Role: "server"}})
		if err != nil {
			t.Fatalf("start %s: %v", names[i], err)
		}
		t.Cleanup(func() { p.Shutdown() })
		for j, o := range pools {
			if j != i && o != nil {
				if _, err := p.Join([]string{o.Addr()}); err != nil {
					t.Fatalf("%s joining %s: %v", names[i], names[j], err)
				}
				break
			}
		}
		pools[i] = p
	}
	whole := func(stage string) {
		t.Helper()
		waitUntil(t, "three members alive everywhere "+stage, func() bool {
			for _, p := range pools {
				if len(aliveNames(p)) != 3 {
					return false
				}
			}
			return true
		})
	}
	for i := range names {
		start(i, 0, Encryption{})
	}
	whole("in plaintext")
	for _, stage := range []struct {
		name string
		enc  func() Encryption
	}{
		{"accepting and sending plaintext", func() Encryption { return Encryption{AcceptPlaintext: true, SendPlaintext: true} }},
		{"sending encrypted", func() Encryption { return Encryption{AcceptPlaintext: true} }},
		{"refusing plaintext", func() Encryption { return Encryption{} }},
	} {
		for i, p := range pools {
			_, port, _ := strings.Cut(p.Addr(), ":")
			n, _ := strconv.Atoi(port)
			p.Leave(time.Second)
			p.Shutdown()
			kr, err := memoryKeyring(key)
			if err != nil {
				t.Fatal(err)
			}
			enc := stage.enc()
			enc.Keyring = kr
			start(i, n, enc)
			whole(fmt.Sprintf("after %s restarted %s", names[i], stage.name))
		}
	}
	plain := startEncrypted(t, "plain", nil)
	if _, err := plain.Join([]string{pools[0].Addr()}); err == nil {
		t.Fatal("a plaintext node joined the encrypted pool")
	}
}
