package gossip

import (
	"errors"
	"fmt"

	"github.com/hashicorp/memberlist"
)

// memoryKeyring is a keyring of keys (primary first) kept in memory only.
func memoryKeyring(keys ...string) (*Keyring, error) {
	if len(keys) == 0 {
		return nil, errors.New("gossip keyring: no key")
	}
	var raw [][]byte
	for _, k := range keys {
		b, err := ParseKey(k)
		if err != nil {
			return nil, err
		}
		raw = append(raw, b)
	}
	ml, err := memberlist.NewKeyring(raw, raw[0])
	if err != nil {
		return nil, fmt.Errorf("gossip keyring: %w", err)
	}
	return &Keyring{ml: ml}, nil
}
