package pluginsock_test

import (
	"testing"

	"github.com/plugreg/plugreg/tests/framework/testcluster"
	"go.uber.org/goleak"
)

// Every test must leave no goroutine behind: sessions, receive loops,
// grace timers and removals all end with Stop.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testcluster.LeakOptions()...) }
