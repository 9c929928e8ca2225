package lazyfs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

// mount mounts a lazyfs (POSIX names) for the test, or skips where FUSE
// cannot be mounted directly (no /dev/fuse, not root).
func mount(t *testing.T) *Mount {
	t.Helper()
	return mountNames(t, POSIX)
}

func mountNames(t *testing.T, names Names) *Mount {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no /dev/fuse: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("mounting FUSE directly needs root")
	}
	dir := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	m, err := New(dir, Config{Capacity: 64 << 20, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Unmount(); err != nil {
			t.Error(err)
		}
	})
	return m
}

// write writes data to path (created or truncated), fsyncing it if sync.
func write(t *testing.T, path string, data string, sync bool) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(data); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
}

func syncDir(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync %s: %v", dir, err)
	}
}

// content is path's content, or "<absent>".
func content(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "<absent>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestCut(t *testing.T) {
	big := string(bytes.Repeat([]byte("0123456789abcdef"), 1000)) // 16000 bytes: four pages
	cases := []struct {
		name    string
		before  func(t *testing.T, d string)
		want    map[string]string // path relative to the case's dir: content after the cut
		journal map[string]string // where Journal names differ from POSIX
	}{
		{"unsynced write lost, durable name stays", func(t *testing.T, d string) {
			write(t, d+"/f", "", true)
			syncDir(t, d)
			write(t, d+"/f", "data", false)
		}, map[string]string{"f": ""}, nil},
		{"new file fsynced, dir not: gone", func(t *testing.T, d string) {
			write(t, d+"/f", "data", true)
		}, map[string]string{"f": "<absent>"}, map[string]string{"f": "data"}},
		{"new file fsynced, dir fsynced: kept", func(t *testing.T, d string) {
			write(t, d+"/f", "data", true)
			syncDir(t, d)
		}, map[string]string{"f": "data"}, nil},
		{"name durable, data never fsynced: empty", func(t *testing.T, d string) {
			write(t, d+"/f", "data", false)
			syncDir(t, d)
		}, map[string]string{"f": ""}, nil},
		{"rename over, dir not fsynced: reverts", func(t *testing.T, d string) {
			write(t, d+"/a", "old", true)
			syncDir(t, d)
			write(t, d+"/a.tmp", "new", true)
			if err := os.Rename(d+"/a.tmp", d+"/a"); err != nil {
				t.Fatal(err)
			}
		}, map[string]string{"a": "old", "a.tmp": "<absent>"}, map[string]string{"a": "old", "a.tmp": "new"}}, // a.tmp's name went with its own fsync, the rename with none
		{"rename over, dir fsynced: sticks", func(t *testing.T, d string) {
			write(t, d+"/a", "old", true)
			syncDir(t, d)
			write(t, d+"/a.tmp", "new", true)
			if err := os.Rename(d+"/a.tmp", d+"/a"); err != nil {
				t.Fatal(err)
			}
			syncDir(t, d)
		}, map[string]string{"a": "new", "a.tmp": "<absent>"}, nil},
		{"rename, data not fsynced, dir fsynced: empty file", func(t *testing.T, d string) {
			write(t, d+"/a", "old", true)
			syncDir(t, d)
			write(t, d+"/a.tmp", "new", false) // the skipped fsync of a write-then-rename
			if err := os.Rename(d+"/a.tmp", d+"/a"); err != nil {
				t.Fatal(err)
			}
			syncDir(t, d)
		}, map[string]string{"a": "", "a.tmp": "<absent>"}, nil},
		{"unlink, dir not fsynced: back", func(t *testing.T, d string) {
			write(t, d+"/f", "data", true)
			syncDir(t, d)
			os.Remove(d + "/f")
		}, map[string]string{"f": "data"}, nil},
		{"unlink, dir fsynced: gone", func(t *testing.T, d string) {
			write(t, d+"/f", "data", true)
			syncDir(t, d)
			os.Remove(d + "/f")
			syncDir(t, d)
		}, map[string]string{"f": "<absent>"}, nil},
		{"truncate fsynced", func(t *testing.T, d string) {
			write(t, d+"/f", big, true)
			syncDir(t, d)
			if err := os.Truncate(d+"/f", 100); err != nil {
				t.Fatal(err)
			}
			f, _ := os.OpenFile(d+"/f", os.O_WRONLY, 0)
			f.Sync()
			f.Close()
		}, map[string]string{"f": big[:100]}, nil},
		{"truncate not fsynced", func(t *testing.T, d string) {
			write(t, d+"/f", big, true)
			syncDir(t, d)
			if err := os.Truncate(d+"/f", 100); err != nil {
				t.Fatal(err)
			}
		}, map[string]string{"f": big}, nil},
		{"truncate down then up fsynced: zeros past the cut point", func(t *testing.T, d string) {
			write(t, d+"/f", big, true)
			syncDir(t, d)
			os.Truncate(d+"/f", 5000)
			os.Truncate(d+"/f", 9000)
			f, _ := os.OpenFile(d+"/f", os.O_WRONLY, 0)
			f.Sync()
			f.Close()
		}, map[string]string{"f": big[:5000] + string(make([]byte, 4000))}, nil},
		{"overwrite in the middle, not fsynced: old pages", func(t *testing.T, d string) {
			write(t, d+"/f", big, true)
			syncDir(t, d)
			f, _ := os.OpenFile(d+"/f", os.O_WRONLY, 0)
			f.WriteAt([]byte("XXXX"), 4094) // across a page boundary
			f.Close()
		}, map[string]string{"f": big}, nil},
		{"overwrite fdatasynced, then again not: the synced one", func(t *testing.T, d string) {
			write(t, d+"/f", big, true)
			syncDir(t, d)
			f, _ := os.OpenFile(d+"/f", os.O_WRONLY, 0)
			f.WriteAt([]byte("XXXX"), 4094)
			if err := unix.Fdatasync(int(f.Fd())); err != nil {
				t.Fatal(err)
			}
			f.WriteAt([]byte("YYYY"), 4094)
			f.WriteAt([]byte("ZZ"), 15000)
			f.Close()
		}, map[string]string{"f": big[:4094] + "XXXX" + big[4098:]}, nil},
		{"new dir: needs its parent fsynced", func(t *testing.T, d string) {
			os.Mkdir(d+"/sub", 0o755)
			write(t, d+"/sub/f", "data", true)
			syncDir(t, d+"/sub")
		}, map[string]string{"sub/f": "<absent>", "sub": "<absent>"}, map[string]string{"sub/f": "data"}},
		{"new dir and file, both dirs fsynced: kept", func(t *testing.T, d string) {
			os.Mkdir(d+"/sub", 0o755)
			write(t, d+"/sub/f", "data", true)
			syncDir(t, d+"/sub")
			syncDir(t, d)
		}, map[string]string{"sub/f": "data"}, nil},
	}
	for _, names := range []Names{POSIX, Journal} {
		t.Run(names.String(), func(t *testing.T) {
			m := mountNames(t, names)
			for i, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					d := filepath.Join(m.Dir, "case"+string(rune('a'+i)))
					if err := os.Mkdir(d, 0o755); err != nil {
						t.Fatal(err)
					}
					syncDir(t, d)
					syncDir(t, m.Dir)
					c.before(t, d)
					t.Logf("cut: %v", m.Cut(nil))
					want := c.want
					if names == Journal && c.journal != nil {
						want = c.journal
					}
					for p, want := range want {
						if p == "sub" {
							if _, err := os.Stat(filepath.Join(d, p)); !errors.Is(err, os.ErrNotExist) {
								t.Errorf("%s: stat %v, want it gone", p, err)
							}
							continue
						}
						if got := content(t, filepath.Join(d, p)); got != want {
							t.Errorf("%s: %d bytes %.40q..., want %d bytes %.40q...", p, len(got), got, len(want), want)
						}
					}
				})
			}
		})
	}
}

// TestFallocate: raft-wal preallocates its segments; the size is durable
// with the fsync, the data reads as zeros.
func TestFallocate(t *testing.T) {
	m := mount(t)
	p := filepath.Join(m.Dir, "seg")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Fallocate(int(f.Fd()), 0, 0, 16<<20); err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("head"), 0)
	f.Sync()
	f.WriteAt([]byte("lost"), 8<<20)
	f.Close()
	syncDir(t, m.Dir)
	m.Cut(nil)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 16<<20 || string(b[:4]) != "head" || !bytes.Equal(b[8<<20:8<<20+4], make([]byte, 4)) {
		t.Fatalf("after the cut: %d bytes, head %q, at 8 MiB %q", len(b), b[:4], b[8<<20:8<<20+4])
	}
}

// TestFull: writes past the capacity fail with ENOSPC, statfs says so, and
// removing a file gives its space back (the disk family's ballast).
func TestFull(t *testing.T) {
	m := mount(t)
	p := filepath.Join(m.Dir, "ballast")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	var off int64
	for ; ; off += 1 << 20 {
		err := syscall.Fallocate(int(f.Fd()), 0, off, 1<<20)
		if errors.Is(err, syscall.ENOSPC) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	var st syscall.Statfs_t
	if err := syscall.Statfs(m.Dir, &st); err != nil || st.Bavail != 0 || off != 64<<20 {
		t.Fatalf("full at %d: statfs %+v, %v", off, st, err)
	}
	if err := os.WriteFile(filepath.Join(m.Dir, "f"), []byte("x"), 0o644); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write on a full disk: %v, want ENOSPC", err)
	}
	os.Remove(p)
	if err := os.WriteFile(filepath.Join(m.Dir, "f"), []byte("x"), 0o644); err != nil {
		t.Fatalf("write once freed: %v", err)
	}
}

// TestRequestsDuringCutFail: from the cut's first instant until it ends,
// requests fail with EIO and change nothing; a file opened before the cut
// stays dead after it.
func TestRequestsDuringCutFail(t *testing.T) {
	m := mount(t)
	p := filepath.Join(m.Dir, "f")
	write(t, p, "durable", true)
	syncDir(t, m.Dir)
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var during []error
	m.Cut(func() {
		_, err := f.WriteAt([]byte("during"), 0)
		during = append(during, err, os.WriteFile(filepath.Join(m.Dir, "g"), []byte("x"), 0o644))
		_, err = os.ReadFile(p)
		during = append(during, err)
	})
	for i, err := range during {
		if !errors.Is(err, syscall.EIO) {
			t.Errorf("request %d during the cut: %v, want EIO", i, err)
		}
	}
	if _, err := f.WriteAt([]byte("after"), 0); !errors.Is(err, syscall.EIO) {
		t.Errorf("write through a handle opened before the cut: %v, want EIO", err)
	}
	if got := content(t, p); got != "durable" {
		t.Errorf("f: %q", got)
	}
	if got := content(t, filepath.Join(m.Dir, "g")); got != "<absent>" {
		t.Errorf("g: %q", got)
	}
}

// The test process serves the mount, so it must never touch a file of it
// through mmap: a goroutine faulting on a mapped page is not at a safe
// point, and a garbage collection would wait for it while it waits for
// the server, which cannot run (go-fuse's docs warn of it). Whatever
// reads through mmap runs in a child process: TestChild, run as
// os.Args[0] with LAZYFS_CHILD=mode and LAZYFS_PATH set.

// child is a child process in the given mode, its stdin and stdout.
type child struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Scanner
	exited chan struct{}
}

func startChild(t *testing.T, mode, path string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestChild$")
	cmd.Env = append(os.Environ(), "LAZYFS_CHILD="+mode, "LAZYFS_PATH="+path)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, in: in, out: bufio.NewScanner(out), exited: make(chan struct{})}
	go func() {
		defer close(c.exited)
		cmd.Wait()
	}()
	t.Cleanup(c.kill)
	return c
}

// line is the child's next line of output ("" once it exited).
func (c *child) line() string {
	if !c.out.Scan() {
		return ""
	}
	return c.out.Text()
}

// ask sends a line and returns the answer.
func (c *child) ask(q string) string {
	io.WriteString(c.in, q+"\n")
	return c.line()
}

// kill SIGKILLs the child and waits until it is gone.
func (c *child) kill() {
	c.cmd.Process.Kill()
	<-c.exited
}

// TestChild is the child process of the tests that need one.
func TestChild(t *testing.T) {
	mode, path := os.Getenv("LAZYFS_CHILD"), os.Getenv("LAZYFS_PATH")
	if mode == "" {
		t.Skip("a child process of the other tests")
	}
	var err error
	switch mode {
	case "mmap":
		err = mmapChild(path)
	case "bolt-write":
		err = boltWriter(path)
	case "bolt-check":
		err = boltCheck(path)
	}
	if err != nil {
		fmt.Println("error:", err)
		t.Fatal(err)
	}
}

// mmapChild maps path and answers each "off len" line on stdin with the
// bytes at off read through the mapping.
func mmapChild(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	b, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return err
	}
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var off, n int
		fmt.Sscan(in.Text(), &off, &n)
		fmt.Printf("%s\n", b[off:off+n])
	}
	return nil
}

// TestMmapReads: bbolt reads its file through a shared mmap and writes it
// with pwrite. The mapping sees each write at once, and after a cut a new
// mapping sees the durable data, not pages the kernel cached before.
func TestMmapReads(t *testing.T) {
	m := mount(t)
	p := filepath.Join(m.Dir, "db")
	write(t, p, string(bytes.Repeat([]byte{'a'}, 3*pageSize)), true)
	syncDir(t, m.Dir)
	c := startChild(t, "mmap", p)
	if l := c.line(); l != "ready" {
		t.Fatalf("child: %q", l)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("synced"), pageSize)
	unix.Fdatasync(int(f.Fd()))
	if got := c.ask(fmt.Sprint(pageSize, 6)); got != "synced" {
		t.Fatalf("mmap after pwrite: %q", got)
	}
	f.WriteAt([]byte("LOST"), 2*pageSize+10)
	if got := c.ask(fmt.Sprint(2*pageSize+10, 4)); got != "LOST" {
		t.Fatalf("mmap after the second pwrite: %q", got)
	}
	f.Close()
	m.Cut(c.kill)
	c = startChild(t, "mmap", p)
	if l := c.line(); l != "ready" {
		t.Fatalf("child after the cut: %q", l)
	}
	if got := c.ask(fmt.Sprint(pageSize, 6)); got != "synced" {
		t.Errorf("after the cut, the synced write reads %q through mmap", got)
	}
	if got := c.ask(fmt.Sprint(2*pageSize+10, 4)); got != "aaaa" {
		t.Errorf("after the cut, the unsynced write reads %q through mmap, want the old aaaa", got)
	}
}

// TestBoltKilledByCut runs bbolt the way raft-boltdb does, in a process
// that the cut SIGKILLs: what it committed (pwrite + fdatasync) survives,
// what it committed with NoSync is lost, and the reopened database (read
// through mmap) is consistent and takes more writes. While the writer
// runs, its flock keeps a second locker out (the kernel keeps the lock:
// lazyfs implements none).
func TestBoltKilledByCut(t *testing.T) {
	m := mount(t)
	dir := filepath.Join(m.Dir, "raft")
	os.Mkdir(dir, 0o755)
	syncDir(t, m.Dir)
	path := filepath.Join(dir, "raft.db")
	w := startChild(t, "bolt-write", path)
	if l := w.line(); l != "ready" {
		t.Fatalf("writer: %q", l)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); !errors.Is(err, unix.EWOULDBLOCK) {
		t.Errorf("flock while the writer holds it: %v, want EWOULDBLOCK", err)
	}
	f.Close()
	t.Logf("cut: %v", m.Cut(w.kill))
	c := startChild(t, "bolt-check", path)
	if l := c.line(); l != "ok" {
		t.Fatalf("after the cut: %s", l)
	}
}

func key(i int) []byte { return []byte{'k', byte('0' + i/10), byte('0' + i%10)} }
func val(i int) []byte { return bytes.Repeat([]byte{byte(i)}, 300) }

// boltWriter commits 100 keys, then one with NoSync, then waits to be
// killed.
func boltWriter(path string) error {
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		return err
	}
	// bbolt fsyncs the file it creates, never its directory: the name
	// of a new database is durable only once something fsyncs the
	// directory (plugreg's data dir is, by every atomicfile write).
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		return err
	}
	d.Close()
	for i := 0; i < 100; i++ {
		if err := db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("logs"))
			if err != nil {
				return err
			}
			return b.Put(key(i), val(i))
		}); err != nil {
			return err
		}
	}
	db.NoSync = true
	if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("logs")).Put([]byte("unsynced"), val(1)) }); err != nil {
		return err
	}
	fmt.Println("ready")
	time.Sleep(time.Minute) // until the cut kills it
	return errors.New("not killed")
}

// boltCheck reopens the database after the cut and checks it.
func boltCheck(path string) error {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return fmt.Errorf("reopen: %w", err)
	}
	defer db.Close()
	if err := db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("logs"))
		if b == nil {
			return errors.New("bucket logs lost")
		}
		for i := 0; i < 100; i++ {
			if v := b.Get(key(i)); !bytes.Equal(v, val(i)) {
				return fmt.Errorf("committed key %s lost", key(i))
			}
		}
		if v := b.Get([]byte("unsynced")); v != nil {
			return errors.New("a NoSync commit survived the cut")
		}
		for err := range tx.Check() {
			return err
		}
		return nil
	}); err != nil {
		return err
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("logs")).Put([]byte("after"), val(7)) }); err != nil {
		return err
	}
	if err := db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket([]byte("logs")).Get([]byte("after")); !bytes.Equal(v, val(7)) {
			return errors.New("a write after the cut is not seen through the mmap")
		}
		return nil
	}); err != nil {
		return err
	}
	fmt.Println("ok")
	return nil
}

// TestConcurrentCuts: a writer that replaces files the safe way (write,
// fsync, rename, fsync the dir) races with cuts (run with -race): every
// cut leaves a tree that reads back, and a replaced file is never empty,
// before or after any cut.
func TestConcurrentCuts(t *testing.T) {
	m := mount(t)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		n := 0
		for {
			select {
			case <-stop:
				return
			default:
			}
			n++
			w := n % 4
			tmp := filepath.Join(m.Dir, "w"+string(rune('0'+w))+".tmp")
			dst := filepath.Join(m.Dir, "w"+string(rune('0'+w)))
			f, err := os.Create(tmp)
			if err != nil {
				continue // EIO during a cut
			}
			_, err = f.WriteString(string(rune('a' + n%26)))
			if err == nil {
				err = f.Sync()
			}
			f.Close()
			if err == nil {
				err = os.Rename(tmp, dst)
			}
			if err == nil {
				if d, err := os.Open(m.Dir); err == nil {
					d.Sync()
					d.Close()
				}
			}
		}
	}()
	for i := 0; i < 20; i++ {
		time.Sleep(10 * time.Millisecond)
		m.Cut(nil)
		entries, err := os.ReadDir(m.Dir)
		if err != nil {
			t.Fatalf("readdir after cut %d: %v", i, err)
		}
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join(m.Dir, e.Name()))
			switch {
			case errors.Is(err, os.ErrNotExist):
				// Renamed away meanwhile.
			case err != nil:
				t.Fatalf("after cut %d, %s: %v", i, e.Name(), err)
			case filepath.Ext(e.Name()) == "" && len(b) != 1:
				t.Fatalf("after cut %d, %s holds %q: a file replaced the safe way lost its data", i, e.Name(), b)
			}
		}
	}
	close(stop)
	<-done
	if m.Cuts() != 20 {
		t.Fatalf("%d cuts", m.Cuts())
	}
}

// TestUnixSocket: agents bind their plugin socket in the data dir.
func TestUnixSocket(t *testing.T) {
	m := mount(t)
	p := filepath.Join(m.Dir, "plugin.sock")
	l, err := net.Listen("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		if c, err := l.Accept(); err == nil {
			c.Write([]byte("hi"))
			c.Close()
		}
	}()
	c, err := net.Dial("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b, _ := io.ReadAll(c)
	if string(b) != "hi" {
		t.Fatalf("read %q", b)
	}
}

// TestUnmountBusy: a mount still in use (the harness failed with an agent
// holding a file) is detached and its connection aborted, so that Unmount
// returns and never leaves a mount behind.
func TestUnmountBusy(t *testing.T) {
	m := mount(t)
	f, err := os.Create(filepath.Join(m.Dir, "held"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := m.Unmount(); err != nil {
		t.Fatal(err)
	}
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(mounts, []byte(m.Dir+" ")) {
		t.Fatalf("%s still mounted", m.Dir)
	}
	if _, err := f.Write([]byte("x")); err == nil {
		t.Fatal("a write through the aborted mount succeeded")
	}
}

// A failed fsync (FailSync) fails with EIO once, for the file armed only;
// what it covered still reads back until the cut, a later fsync succeeds
// without writing it, and the cut takes it: the file keeps what was
// synced before, plus what was written and synced after.
func TestFailSync(t *testing.T) {
	m := mount(t)
	d := m.Dir
	write(t, d+"/other.db", "", true)
	f, err := os.OpenFile(d+"/seg.wal", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syncDir(t, d)
	page := func(c byte) []byte { return bytes.Repeat([]byte{c}, 4096) }
	if _, err := f.WriteAt(page('a'), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	failed := m.FailSync(".wal")
	write(t, d+"/other.db", "x", true) // another name: not the armed failure's
	if _, err := f.WriteAt(page('b'), 4096); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("the armed fsync answered %v, want EIO", err)
	}
	select {
	case sf := <-failed:
		if sf.Name != "seg.wal" || sf.Dropped != 1 {
			t.Fatalf("failure %+v, want seg.wal with 1 page dropped", sf)
		}
	default:
		t.Fatal("the failure was not reported")
	}
	if got := content(t, d+"/seg.wal"); got != string(page('a'))+string(page('b')) {
		t.Fatalf("before the cut the dropped page must still read back; read %d bytes", len(got))
	}
	if _, err := f.WriteAt(page('c'), 8192); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("the fsync after the failed one: %v", err)
	}
	m.Cut(nil)
	want := string(page('a')) + string(make([]byte, 4096)) + string(page('c'))
	if got := content(t, d+"/seg.wal"); got != want {
		t.Fatalf("after the cut: %d bytes, page 2 %q..., want the dropped page as zeros", len(got), got[4096:4100])
	}
	if got := content(t, d+"/other.db"); got != "x" {
		t.Fatalf("other.db after the cut: %q", got)
	}
}

// A cut that keeps some unsynced pages: each page of the file after the
// cut is its synced content or its unsynced one, never anything else; a
// prefix keeps the first pages only; a torn page is new in its first
// sectors and old in the rest. One seed picks the same pages each time.
func TestCutKeeping(t *testing.T) {
	const pages = 16
	for _, tc := range []struct {
		keep Keep
		seed int64
	}{
		{Keep{Mode: KeepSubset}, 1}, {Keep{Mode: KeepSubset, Tear: true}, 2},
		{Keep{Mode: KeepPrefix}, 3}, {Keep{Mode: KeepPrefix, Tear: true}, 4},
	} {
		t.Run(tc.keep.String(), func(t *testing.T) {
			m := mount(t)
			path := m.Dir + "/seg.wal"
			old := bytes.Repeat([]byte{'o'}, pages*4096)
			write(t, path, string(old), true)
			syncDir(t, m.Dir)
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt(bytes.Repeat([]byte{'n'}, pages*4096), 0); err != nil {
				t.Fatal(err)
			}
			f.Close()
			stats := m.CutKeeping(nil, tc.keep, rand.New(rand.NewSource(tc.seed)))
			got := []byte(content(t, path))
			if len(got) != pages*4096 {
				t.Fatalf("%d bytes after the cut", len(got))
			}
			var kinds []byte // per page: n(ew), o(ld), t(orn)
			for p := 0; p < pages; p++ {
				pg := got[p*4096 : (p+1)*4096]
				switch {
				case bytes.Equal(pg, bytes.Repeat([]byte{'n'}, 4096)):
					kinds = append(kinds, 'n')
				case bytes.Equal(pg, bytes.Repeat([]byte{'o'}, 4096)):
					kinds = append(kinds, 'o')
				default:
					s := bytes.IndexByte(pg, 'o')
					if s <= 0 || s%512 != 0 || !bytes.Equal(pg[:s], bytes.Repeat([]byte{'n'}, s)) || !bytes.Equal(pg[s:], bytes.Repeat([]byte{'o'}, 4096-s)) {
						t.Fatalf("page %d is neither old, new nor torn at a sector", p)
					}
					kinds = append(kinds, 't')
				}
			}
			n, tn := bytes.Count(kinds, []byte("n")), bytes.Count(kinds, []byte("t"))
			if n != stats.KeptPages || tn != stats.TornPages {
				t.Fatalf("pages %s: stats say %d kept and %d torn", kinds, stats.KeptPages, stats.TornPages)
			}
			if tc.keep.Tear != (tn == 1) && n+tn > 0 {
				t.Fatalf("pages %s: tear %v", kinds, tc.keep.Tear)
			}
			if tc.keep.Mode == KeepPrefix {
				if !regexp.MustCompile(`^n*t?o*$`).Match(kinds) {
					t.Fatalf("a prefix cut kept pages %s", kinds)
				}
			}
			if n+tn > 0 && n+tn < pages && !slices.Equal(stats.Partial, []string{"seg.wal"}) {
				t.Fatalf("partial files %v", stats.Partial)
			}
			t.Logf("pages after the cut: %s (%v)", kinds, stats)
		})
	}
}

// SlowSyncs delays each fsync, and only fsyncs: a write returns at once.
func TestSlowSyncs(t *testing.T) {
	m := mount(t)
	before := m.SlowSyncs(300 * time.Millisecond)
	write(t, m.Dir+"/f", "data", false)
	if n := m.SlowSyncs(300 * time.Millisecond); n != before {
		t.Fatalf("a write without fsync was delayed (%d)", n-before)
	}
	start := time.Now()
	write(t, m.Dir+"/g", "data", true)
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("an fsync took %v, want at least the delay", d)
	}
	if after := m.SlowSyncs(0); after != before+1 {
		t.Fatalf("delayed %d fsyncs, want 1", after-before)
	}
}

// A power failure inside an fsync (FreezeAtSync): that fsync and every
// request after it fail; the cut then keeps a prefix of the pages the
// fsync was writing, so the file ends in what it had synced before and a
// part of the rest.
func TestFreezeAtSync(t *testing.T) {
	m := mount(t)
	d := m.Dir
	f, err := os.OpenFile(d+"/seg.wal", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syncDir(t, d)
	if _, err := f.WriteAt(bytes.Repeat([]byte{'a'}, 4096), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	frozen := m.FreezeAtSync(".wal")
	if _, err := f.WriteAt(bytes.Repeat([]byte{'b'}, 4*4096), 4096); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("the fsync the power failed in answered %v, want EIO", err)
	}
	if sf := <-frozen; sf.Name != "seg.wal" {
		t.Fatalf("froze at %+v", sf)
	}
	if _, err := f.WriteAt([]byte("c"), 0); err == nil {
		t.Fatal("a write after the power failed succeeded")
	}
	stats := m.CutKeeping(nil, Keep{Mode: KeepPrefix}, rand.New(rand.NewSource(7)))
	got := []byte(content(t, d+"/seg.wal"))
	want := append(bytes.Repeat([]byte{'a'}, 4096), bytes.Repeat([]byte{'b'}, stats.KeptPages*4096)...)
	if !bytes.Equal(got[:len(want)], want) || bytes.ContainsRune(got[len(want):], 'b') {
		t.Fatalf("after the cut: %d bytes; kept %d of the fsync's pages (%v)", len(got), stats.KeptPages, stats)
	}
}
