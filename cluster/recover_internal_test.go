package cluster

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// Every peers.json that is not a clean list of distinct servers is
// refused, saying what is wrong; a clean one reads as raft.ReadConfigJSON
// reads it (the format is Consul's, raft's reader the reference).
func TestParsePeersJSON(t *testing.T) {
	bad := []struct{ name, json, want string }{
		{"not JSON", `[{"id": "n1", "address": "10.0.0.1:7300"`, "not a JSON list"},
		{"an object", `{"id": "n1", "address": "10.0.0.1:7300"}`, "not a JSON list"},
		{"legacy list of addresses", `["10.0.0.1:7300"]`, "not a JSON list"},
		{"empty list", `[]`, "the list is empty"},
		{"null", `null`, "the list is empty"},
		{"trailing data", `[{"id": "n1", "address": "10.0.0.1:7300"}] []`, "data after the JSON list"},
		{"unknown key", `[{"id": "n1", "address": "10.0.0.1:7300", "nonvoter": true}]`, `unknown field "nonvoter"`},
		{"missing id", `[{"address": "10.0.0.1:7300"}]`, `entry 1 has no "id"`},
		{"empty id", `[{"id": "n1", "address": "10.0.0.1:7300"}, {"id": "", "address": "10.0.0.2:7300"}]`, `entry 2 has no "id"`},
		{"id no node could have", `[{"id": "n/1", "address": "10.0.0.1:7300"}]`, `entry 1: "n/1" cannot be a node ID`},
		{"missing address", `[{"id": "n1"}]`, `entry 1 (n1) has no "address"`},
		{"address without port", `[{"id": "n1", "address": "10.0.0.1"}]`, "want IP:PORT"},
		{"host name", `[{"id": "n1", "address": "server1:7300"}]`, "is not an IP address"},
		{"port not a number", `[{"id": "n1", "address": "10.0.0.1:http"}]`, "is not a port number"},
		{"port out of range", `[{"id": "n1", "address": "10.0.0.1:70000"}]`, "is not a port number"},
		{"port zero", `[{"id": "n1", "address": "10.0.0.1:0"}]`, "is not a port number"},
		{"duplicate id", `[{"id": "n1", "address": "10.0.0.1:7300"}, {"id": "n1", "address": "10.0.0.2:7300"}]`, `id "n1" is listed twice`},
		{"duplicate address", `[{"id": "n1", "address": "10.0.0.1:7300"}, {"id": "n2", "address": "10.0.0.1:7300"}]`, "address 10.0.0.1:7300 is listed twice"},
		{"duplicate address, spelled differently", `[{"id": "n1", "address": "[::1]:7300"}, {"id": "n2", "address": "[0:0::1]:7300"}]`, "address [::1]:7300 is listed twice"},
		{"no voter", `[{"id": "n1", "address": "10.0.0.1:7300", "non_voter": true}]`, "a cluster needs a voter"},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			_, err := parsePeersJSON([]byte(c.json))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("parsePeersJSON(%s) = %v; want an error with %q", c.json, err, c.want)
			}
		})
	}

	good := []string{
		`[{"id": "n1", "address": "10.0.0.1:7300", "non_voter": false}]`,
		`[{"id": "n1", "address": "10.0.0.1:7300"}, {"id": "n2", "address": "10.0.0.2:7300", "non_voter": true}, {"id": "n3", "address": "[fd00::3]:7300"}]`,
		"[\n  {\"id\": \"n1\", \"address\": \"127.0.0.1:7300\"}\n]\n",
	}
	for i, g := range good {
		got, err := parsePeersJSON([]byte(g))
		if err != nil {
			t.Fatalf("good %d: %v", i, err)
		}
		path := filepath.Join(t.TempDir(), PeersFileName)
		if err := os.WriteFile(path, []byte(g), 0o600); err != nil {
			t.Fatal(err)
		}
		want, err := raft.ReadConfigJSON(path)
		if err != nil {
			t.Fatalf("good %d: raft.ReadConfigJSON: %v", i, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("good %d: read as %+v; raft.ReadConfigJSON reads %+v", i, got, want)
		}
	}
}

// removeSynced removes the file; a missing file is an error (the caller
// must know the recovery will not run again).
func TestRemoveSynced(t *testing.T) {
	path := filepath.Join(t.TempDir(), PeersFileName)
	os.WriteFile(path, []byte("[]"), 0o600)
	if err := removeSynced(path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("still there: %v", err)
	}
	if err := removeSynced(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("second remove: %v; want not exist", err)
	}
}
