package gossip

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/hashicorp/memberlist"
	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/internal/atomicfile"
)

// KeyringFileName is the keyring's file in an agent's data dir.
const KeyringFileName = "gossip.keyring"

// KeySize is the size of the keys GenerateKey makes (AES-256). ParseKey
// also takes 16 and 24 bytes, as memberlist does.
const KeySize = 32

// GenerateKey returns a new random gossip key, base64-encoded, as
// -encrypt and the keyring commands take it.
func GenerateKey() (string, error) {
	b := make([]byte, KeySize)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate gossip key: %w", err)
	}
	return base64.StdEncoding.EncodeToString(b), nil
}

// ParseKey decodes a base64 gossip key and checks its size. Its errors
// never quote the key.
func ParseKey(s string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%w: gossip key is not valid base64", api.ErrInvalid)
	}
	if err := memberlist.ValidateKey(b); err != nil {
		return nil, fmt.Errorf("%w: gossip key has %d bytes; it must have 16, 24 or 32", api.ErrInvalid, len(b))
	}
	return b, nil
}

// Keyring is an agent's gossip encryption keys: memberlist's keyring
// (AES-GCM; the primary key encrypts, every installed key decrypts), kept
// in a file so that a restart, and a key rotated while the agent ran,
// survive. The file, not -encrypt, is the truth once it exists, as
// Consul's local keyring is: a rotated cluster's agents restarted with
// their original -encrypt still join.
type Keyring struct {
	mu   sync.Mutex // serializes changes and their writes to the file
	ml   *memberlist.Keyring
	path string // "" : not persisted (tests)
}

// OpenKeyring returns the keyring kept at path, or, when no file is there
// and encrypt is set, a new one holding encrypt (written to path). It
// returns nil, nil when there is neither: gossip is not encrypted.
// ignored reports that the file was used and encrypt, which differs from
// its primary key, was not.
func OpenKeyring(path, encrypt string) (kr *Keyring, ignored bool, err error) {
	var flagKey []byte
	if encrypt != "" {
		if flagKey, err = ParseKey(encrypt); err != nil {
			return nil, false, fmt.Errorf("-encrypt: %w", err)
		}
	}
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		keys, err := decodeKeyring(b)
		if err != nil {
			return nil, false, fmt.Errorf("gossip keyring %s: %w", path, err)
		}
		ml, err := memberlist.NewKeyring(keys, keys[0])
		if err != nil {
			return nil, false, fmt.Errorf("gossip keyring %s: %w", path, err)
		}
		ignored = flagKey != nil && string(flagKey) != string(keys[0])
		return &Keyring{ml: ml, path: path}, ignored, nil
	case !errors.Is(err, os.ErrNotExist):
		return nil, false, fmt.Errorf("gossip keyring: %w", err)
	case flagKey == nil:
		return nil, false, nil
	}
	ml, err := memberlist.NewKeyring(nil, flagKey)
	if err != nil {
		return nil, false, fmt.Errorf("-encrypt: %w", err)
	}
	kr = &Keyring{ml: ml, path: path}
	if err := kr.save(); err != nil {
		return nil, false, err
	}
	return kr, false, nil
}

func decodeKeyring(b []byte) ([][]byte, error) {
	var enc []string
	if err := json.Unmarshal(b, &enc); err != nil {
		return nil, fmt.Errorf("not a JSON list of keys: %w", err)
	}
	if len(enc) == 0 {
		return nil, errors.New("holds no key")
	}
	keys := make([][]byte, 0, len(enc))
	for i, s := range enc {
		k, err := ParseKey(s)
		if err != nil {
			return nil, fmt.Errorf("key %d: %w", i, err)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// Status lists the keys, primary first.
func (k *Keyring) Status() api.KeyringStatus {
	var st api.KeyringStatus
	for _, key := range k.ml.GetKeys() { // primary first
		st.Keys = append(st.Keys, base64.StdEncoding.EncodeToString(key))
	}
	st.PrimaryKey = base64.StdEncoding.EncodeToString(k.ml.GetPrimaryKey())
	return st
}

// Install adds key; it decrypts at once and encrypts once used. Installing
// an installed key changes nothing.
func (k *Keyring) Install(key string) error {
	return k.change("install", key, k.ml.AddKey)
}

// Use makes an installed key the primary one.
func (k *Keyring) Use(key string) error {
	return k.change("use", key, func(b []byte) error {
		if !k.has(b) {
			return fmt.Errorf("%w: the key is not installed on this agent", api.ErrInvalid)
		}
		return k.ml.UseKey(b)
	})
}

// Remove removes a key that is not the primary one.
func (k *Keyring) Remove(key string) error {
	return k.change("remove", key, func(b []byte) error {
		if string(b) == string(k.ml.GetPrimaryKey()) {
			return fmt.Errorf("%w: the primary key cannot be removed; use another first", api.ErrInvalid)
		}
		if !k.has(b) {
			return nil // removed already: a retried rotation step is a no-op
		}
		return k.ml.RemoveKey(b)
	})
}

func (k *Keyring) has(b []byte) bool {
	return slices.ContainsFunc(k.ml.GetKeys(), func(have []byte) bool { return bytes.Equal(have, b) })
}

func (k *Keyring) change(op, key string, apply func([]byte) error) error {
	b, err := ParseKey(key)
	if err != nil {
		return fmt.Errorf("keyring %s: %w", op, err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := apply(b); err != nil {
		return fmt.Errorf("keyring %s: %w", op, err)
	}
	if err := k.save(); err != nil {
		return fmt.Errorf("keyring %s: %w", op, err)
	}
	return nil
}

// save writes the keys, primary first, to the file (0600, replaced
// atomically). Callers hold mu, or own k alone.
func (k *Keyring) save() error {
	if k.path == "" {
		return nil
	}
	b, _ := json.Marshal(k.Status().Keys)
	if err := os.MkdirAll(filepath.Dir(k.path), 0o700); err != nil {
		return fmt.Errorf("write gossip keyring: %w", err)
	}
	if err := atomicfile.WriteFile(k.path, b, 0o600); err != nil {
		return fmt.Errorf("gossip keyring: %w", err)
	}
	return nil
}
