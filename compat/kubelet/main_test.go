//go:build linux

package kubelet

import (
	"testing"

	"github.com/plugreg/plugreg/internal/testing/proctest"
)

// TestMain removes the binaries proctest built after the tests.
func TestMain(m *testing.M) { proctest.Main(m) }
