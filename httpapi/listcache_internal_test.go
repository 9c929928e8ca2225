package httpapi

import (
	"fmt"
	"testing"

	"github.com/plugreg/plugreg/api"
)

// The list cache is bounded in entries and bytes whatever names readers
// ask for: empty lists (any unknown type) are not kept, and past
// maxCachedTypes the oldest entries make room. Before, every name asked
// for kept an entry (its bound counted bodies, 3 bytes for "[]").
func TestListCacheBounded(t *testing.T) {
	c := newListCache()
	for i := 0; i < 3*maxCachedTypes; i++ {
		c.body(fmt.Sprintf("unknown-%d", i), 7, nil)
	}
	if n := len(c.types); n != 0 {
		t.Fatalf("%d entries after asking for empty lists, want none", n)
	}
	one := []*api.PluginInfo{{Type: "t", Name: "n", AllocID: "a", ConnectionInfo: &api.ConnectionInfo{SocketPath: "/s"}}}
	for i := 0; i < 3*maxCachedTypes; i++ {
		c.body(fmt.Sprintf("type-%d", i), 7, one)
	}
	if n := len(c.types); n > maxCachedTypes || c.bytes > maxCachedBytes {
		t.Fatalf("%d entries, %d bytes; want at most %d and %d", n, c.bytes, maxCachedTypes, maxCachedBytes)
	}
	want := 0
	for k, e := range c.types {
		want += len(k) + len(e.body)
	}
	if c.bytes != want {
		t.Fatalf("bytes counted %d, held %d", c.bytes, want)
	}
}
