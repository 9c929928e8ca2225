package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/tests/framework/proctest"
)

// A SIGTERM while the agent is still starting stops it gracefully once
// started (exit 0), instead of killing it half started. Signals sent at a
// spread of moments after exec; one that lands before Go's main has
// caught anything kills the process, but then it has logged nothing.
func TestSignalWhileStarting(t *testing.T) {
	bin := proctest.Build(t, "./cmd/plugreg")
	if env := os.Getenv("PLUGREG_STARTSIGNAL_BIN"); env != "" {
		bin = env // an older build, to see the test fail on it
	}
	graceful := 0
	for i := 0; i < 12; i++ {
		dir := t.TempDir()
		p := proctest.FreePorts(t, "127.0.0.1", 3)
		log := filepath.Join(dir, "agent.log")
		a := proctest.Start(t, "agent", bin, log, "agent", "-node", "n1", "-data-dir", filepath.Join(dir, "d"), "-bind", "127.0.0.1",
			"-http-port", strconv.Itoa(p[0]), "-server-port", strconv.Itoa(p[1]), "-gossip-port", strconv.Itoa(p[2]), "-bootstrap-expect", "1", "-log-level", "debug")
		time.Sleep(time.Duration(i*4) * time.Millisecond)
		if _, ok := a.Stop(t); !ok {
			t.Fatalf("run %d: no exit on SIGTERM", i)
		}
		st := a.State()
		logged := strings.Contains(a.Log(), "[")
		switch {
		case st.ExitCode() == 0:
			graceful++
		case logged:
			t.Fatalf("run %d (signal after %d ms): %v after logging:\n%s", i, i*4, st, a.Log())
		}
	}
	t.Logf("%d of 12 runs stopped gracefully; the others before logging anything", graceful)
}
