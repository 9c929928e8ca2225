// Command hello-plugin is the smallest plugin built on plugreg's SDK (the
// one in the README): it registers itself with its host's agent
// (PLUGREG_PLUGIN_SOCKET) as demo/hello, logs every plugin registered, and
// deregisters on Ctrl-C.
package main

import (
	"context"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/stub"
)

type plugin struct{}

func (plugin) Registered(ctx context.Context, ev *api.Event) error {
	log.Printf("%d: %s/%s registered on %s", ev.Index, ev.Info.Type, ev.Info.Name, ev.Info.NodeID)
	return nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, err := stub.New(plugin{}, stub.WithPluginType("demo"), stub.WithPluginName("hello"), stub.WithEndpoint("/run/hello.sock"))
	if err != nil {
		log.Fatal(err)
	}
	if err := s.Run(ctx); err != nil { // registered until Ctrl-C, then deregistered
		log.Fatal(err)
	}
}
