package stub_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/plugreg/plugreg/stub"
)

// TestRegistrationTimeout: WithRegistrationTimeout bounds the stub's wait
// for an agent slow to answer (its registry writes held back: a slow
// cluster at boot), both ways. Shorter than the default (5s), Start fails
// with a timeout error where the default would have waited for the
// agent's answer; longer, Start waits past the default and registers.
func TestRegistrationTimeout(t *testing.T) {
	e := newEnvWithoutAgent(t, 10*time.Second)
	start := func(name string, timeout time.Duration) error {
		s, err := stub.New(&recorder{}, quiet, stub.WithSocketPath(e.path), stub.WithPluginType("demo"), stub.WithPluginName(name),
			stub.WithEndpoint("/run/"+name+".sock"), stub.WithRegistrationTimeout(timeout))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Stop)
		return s.Start(context.Background())
	}

	// Shorter: the agent answers after 3s, the stub waits 1s.
	e.registryDelay = 3 * time.Second
	e.startAgent()
	err := start("quick", time.Second)
	if err == nil {
		t.Fatal("registered with an agent slower than the registration timeout")
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "WithRegistrationTimeout") {
		t.Fatalf("Start: %v; want a timeout error that names WithRegistrationTimeout", err)
	}
	t.Logf("Start with an agent slower than the registration timeout: %v", err)

	// Longer: the agent answers after 7s, the stub waits a minute.
	e.svc.Stop()
	e.registryDelay = 7 * time.Second
	e.startAgent()
	if err := start("patient", time.Minute); err != nil {
		t.Fatalf("Start with a registration timeout longer than the agent's answer: %v", err)
	}
	e.c.Eventually(20*time.Second, "registered on every server", func() bool { return e.listedEverywhere("demo", "patient", 1) })
}
