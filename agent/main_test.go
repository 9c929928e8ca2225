package agent_test

import (
	"testing"

	"github.com/plugreg/plugreg/tests/framework/testcluster"
	"go.uber.org/goleak"
)

// Every test must leave no goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testcluster.LeakOptions()...) }
