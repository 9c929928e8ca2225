package stub_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/plugreg/plugreg/tests/framework/proctest"
	"github.com/plugreg/plugreg/tests/framework/testcluster"
	"go.uber.org/goleak"
)

// TestMain removes the binaries proctest built, and fails the run if a
// test left a goroutine behind (a stub's run or handler goroutine, a
// session's, a connection's).
func TestMain(m *testing.M) {
	code := m.Run()
	proctest.RemoveBuilds()
	if code == 0 {
		if err := goleak.Find(testcluster.LeakOptions()...); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines left behind:", err)
			code = 1
		}
	}
	os.Exit(code)
}
