package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Bounds on stopping the agent. An init system waits for the process after
// SIGTERM (systemd's TimeoutStopSec defaults to 90s, then SIGKILL); an
// operator's 'systemctl stop' waits with it. The agent ends on its own well
// before: gracefully when it can, else with a line saying what it left.
const (
	signalStopGrace = 10 * time.Second // after SIGTERM or SIGINT
	leaveStopGrace  = 30 * time.Second // after 'plugreg leave' (leadership transfer, removal)
	httpStopGrace   = 2 * time.Second  // in-flight requests, before the HTTP server is closed
)

var (
	errStopTimeout = errors.New("shutdown did not finish in time; exited with work abandoned")
	errStopForced  = errors.New("second signal; exited at once")
)

// stopWithin runs stop and waits for it at most grace, or until a signal
// arrives on sig (the operator's second Ctrl-C or SIGTERM). stage reports
// what stop is doing, for the log line that says what was abandoned.
func stopWithin(logger hclog.Logger, stop func() error, stage func() string, grace time.Duration, sig <-chan os.Signal) error {
	done := make(chan error, 1)
	go func() { done <- stop() }()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		logger.Error("shutdown did not finish in time; exiting anyway", "waited", grace, "abandoned", stage())
		return fmt.Errorf("%w (after %v, while %s)", errStopTimeout, grace, stage())
	case s := <-sig:
		logger.Warn("second signal; exiting at once", "signal", s, "abandoned", stage())
		return fmt.Errorf("%w (while %s)", errStopForced, stage())
	}
}
