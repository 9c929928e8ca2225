package e2e

import (
	"testing"

	"github.com/plugreg/plugreg/tests/framework/proctest"
)

// proctest.Main removes the plugreg binaries the tests built.
func TestMain(m *testing.M) { proctest.Main(m) }
