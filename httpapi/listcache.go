package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"

	"github.com/plugreg/plugreg/api"
)

// A type's list at a given Raft index is the same on every node and
// every time it is asked for: every node applies the same log, and the
// index names the state exactly. Encoding it is most of what a list
// costs the server (a thousand instances are ~235 KB of JSON), and a
// registry is read far more often than written, so each node keeps the
// last encoding of each type's list and sends it again while the type's
// index has not moved. A write to the type moves the index the next list
// reports, so a stale body is never served; a write to another type
// moves it too and costs one encoding more, never a wrong answer.
// (A state restored from a snapshot carries the snapshot's index and the
// content it had there; an operator's restore is a log entry of its own,
// whose index names the restored state, so it moves every type's index.)

const (
	// maxCachedList bounds one cached body; larger lists are encoded
	// each time (a cache of a few huge lists would hold memory that the
	// registry itself needs).
	maxCachedList = 1 << 20
	// maxCachedBytes bounds all cached bodies (and their type names)
	// together.
	maxCachedBytes = 16 << 20
	// maxCachedTypes bounds the entries: anyone who may read can ask for
	// any number of type names.
	maxCachedTypes = 4096
)

type encodedList struct {
	index uint64
	body  []byte
}

// listCache holds the last encoded list of each type. Safe for
// concurrent use.
type listCache struct {
	mu    sync.Mutex
	types map[string]encodedList
	bytes int
}

func newListCache() *listCache { return &listCache{types: map[string]encodedList{}} }

// body returns the JSON of plugins, the list of typ at index, encoding
// it only when no encoding at that index is cached.
func (c *listCache) body(typ string, index uint64, plugins []*api.PluginInfo) []byte {
	c.mu.Lock()
	e, ok := c.types[typ]
	c.mu.Unlock()
	if ok && e.index == index {
		return e.body
	}
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(nonNil(plugins)); err != nil {
		// PluginInfo always encodes; keep the reason in the answer.
		return []byte(strconv.Quote(err.Error()))
	}
	b := buf.Bytes()
	if len(b) > maxCachedList || index == 0 || len(plugins) == 0 {
		// An empty list (a type no one registered: any name a reader
		// asks for) costs nothing to encode and is not kept.
		return b
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.types[typ]; ok {
		if old.index > index {
			return b // a newer one is cached already (another reader)
		}
		c.bytes -= len(typ) + len(old.body)
		delete(c.types, typ)
	}
	for k, old := range c.types { // make room: drop any
		if c.bytes+len(typ)+len(b) <= maxCachedBytes && len(c.types) < maxCachedTypes {
			break
		}
		c.bytes -= len(k) + len(old.body)
		delete(c.types, k)
	}
	c.types[typ] = encodedList{index: index, body: b}
	c.bytes += len(typ) + len(b)
	return b
}

// writeBody sends an encoded JSON body as writeJSON would have encoded it.
func writeBody(w http.ResponseWriter, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	w.Write(body)
}
