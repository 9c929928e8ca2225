// Command stub-plugin is a plugin built on plugreg's SDK (package stub):
// it registers itself with its host's agent through the agent's plugin
// socket, stays registered while it runs, and logs the registry events of
// one plugin type, one line each, with their Raft index.
//
//	PLUGREG_PLUGIN_SOCKET=/tmp/plugreg-dev-.../dev1/plugin.sock go run ./examples/stub-plugin -type demo
//
// Ctrl-C (or SIGTERM) deregisters it at once; kill -9 leaves it registered
// for the agent's -plugin-grace, in which a restarted stub-plugin takes it
// over without an event.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/stub"
)

// logger logs what the agent says and the events it gets.
type logger struct{}

func (logger) Configure(_ context.Context, cfg stub.Config) (stub.EventMask, error) {
	log.Printf("configured: node=%s alloc=%s reclaimed=%v config=%q", cfg.NodeID, cfg.AllocID, cfg.Reclaimed, cfg.Config)
	return 0, nil // the mask from WithEventMask
}

func (logger) Registered(_ context.Context, ev *api.Event) error   { return logEvent(ev) }
func (logger) Updated(_ context.Context, ev *api.Event) error      { return logEvent(ev) }
func (logger) Deregistered(_ context.Context, ev *api.Event) error { return logEvent(ev) }
func (logger) Reset(_ context.Context, ev *api.Event) error {
	log.Printf("event index=%d kind=reset plugins=%d", ev.Index, len(ev.Plugins))
	return nil
}
func (logger) Shutdown(context.Context) {
	log.Printf("the agent is stopping; reconnecting when it is back")
}

func logEvent(ev *api.Event) error {
	log.Printf("event index=%d kind=%s plugin=%s/%s alloc=%s node=%s", ev.Index, ev.EventType, ev.Info.Type, ev.Info.Name, ev.Info.AllocID, ev.Info.NodeID)
	return nil
}

func main() {
	typ := flag.String("type", "demo", "the plugin's type")
	name := flag.String("name", "stub-plugin", "the plugin's name")
	idx := flag.String("idx", "00", "the plugin's idx (two digits): another instance on the host needs another")
	endpoint := flag.String("endpoint", "", "how the plugin is reached (default: /run/NAME.sock)")
	watch := flag.String("watch", "", "log the events of this plugin type (default: -type)")
	flag.Parse()
	if *endpoint == "" {
		*endpoint = "/run/" + *name + ".sock"
	}
	if *watch == "" {
		*watch = *typ
	}
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	log.SetOutput(os.Stdout)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, err := stub.New(logger{}, stub.WithPluginType(*typ), stub.WithPluginName(*name), stub.WithPluginIdx(*idx),
		stub.WithEndpoint(*endpoint), stub.WithEventMask(stub.AllEvents, *watch))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	log.Printf("registering %s/%s idx %s", *typ, *name, *idx)
	if err := s.Run(ctx); err != nil { // returns when ctx ends (deregistered) or the agent refused
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	log.Printf("stopped and deregistered")
}
