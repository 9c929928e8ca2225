package httpapi_test

import (
	"testing"

	"github.com/plugreg/plugreg/tests/framework/testcluster"
	"go.uber.org/goleak"
)

// Every test must leave no goroutine behind: servers (raft's, memberlist's
// and ours), streams and watches all stop.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testcluster.LeakOptions()...) }
