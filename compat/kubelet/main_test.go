//go:build linux

package kubelet

import (
	"testing"

	"github.com/plugreg/plugreg/tests/framework/proctest"
)

// TestMain removes the binaries proctest built after the tests.
func TestMain(m *testing.M) { proctest.Main(m) }
