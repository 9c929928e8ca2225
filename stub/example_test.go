package stub_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/stub"
)

// printer is a plugin that logs the instances registered of the types it
// follows: implementing RegisteredInterface and DeregisteredInterface asks
// for those events.
type printer struct{}

func (printer) Registered(_ context.Context, ev *api.Event) error {
	log.Printf("registered: %s/%s at %v", ev.Info.Type, ev.Info.Name, ev.Info.ConnectionInfo)
	return nil
}

func (printer) Deregistered(_ context.Context, ev *api.Event) error {
	log.Printf("deregistered: %s/%s", ev.Info.Type, ev.Info.Name)
	return nil
}

// A plugin registers itself with its host's agent, through the agent's
// plugin socket ($PLUGREG_PLUGIN_SOCKET, else stub.DefaultSocketPath), and
// stays registered while Run runs; on Ctrl-C, Run deregisters it and
// returns. With no agent at the socket, the stub logs at once where it
// waits and for how long, and Run fails after the registration timeout.
// (Not run as a test: it needs an agent's socket.)
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	s, err := stub.New(printer{}, stub.WithPluginType("demo"), stub.WithPluginName("printer"),
		stub.WithEndpoint("/run/printer.sock"), stub.WithEventMask(stub.Registered|stub.Deregistered, "csi-node"))
	if err != nil {
		log.Fatal(err)
	}
	if err := s.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// A plugin started at boot, maybe before its agent, waits for the agent's
// socket (here at most a minute) instead of failing after the registration
// timeout; Start returns once the plugin is registered, and Wait when the
// stub has stopped. (Not run as a test: it needs an agent's socket.)
func ExampleWithWaitForSocket() {
	s, err := stub.New(printer{}, stub.WithPluginType("demo"), stub.WithEndpoint("10.0.0.7:9000"),
		stub.WithSocketPath("/var/lib/plugreg/plugin.sock"), stub.WithWaitForSocket(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		log.Fatal(err) // context.DeadlineExceeded when no agent came within the minute
	}
	defer s.Stop() // deregisters at once
	if err := s.Wait(); err != nil {
		log.Fatal(err)
	}
}
