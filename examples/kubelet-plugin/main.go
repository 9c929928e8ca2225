// Command kubelet-plugin is a plugin of the kubelet plugin registration
// protocol, for trying plugreg's discovery: it puts a registration socket
// in a plugins dir (a plugreg agent's -plugins-dir, or kubelet's
// /var/lib/kubelet/plugins_registry) and says what it is answered: by the
// agent in a dir plugreg owns; in a dir shared with kubelet (kubelet's
// own, by default) only kubelet answers, and plugreg never does
// (docs/kubelet.md).
//
//	go run ./examples/kubelet-plugin -dir DIR -type CSIPlugin -name ebs.csi.example.com -versions 1.0.0
//
// Ctrl-C removes the socket; the agent deregisters the plugin.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/plugreg/plugreg/internal/kubeletplugin"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

func main() {
	dir := flag.String("dir", "", "plugins dir to put the registration socket in (required)")
	typ := flag.String("type", registerapi.CSIPlugin, "plugin type: CSIPlugin, DRAPlugin, DevicePlugin, or any other")
	name := flag.String("name", "ebs.csi.example.com", "plugin name")
	endpoint := flag.String("endpoint", "", "the plugin's service socket (default: the registration socket)")
	versions := flag.String("versions", "1.0.0", "supported versions, comma-separated (DRAPlugin: v1.DRAPlugin)")
	flag.Parse()
	if *dir == "" {
		flag.Usage()
		os.Exit(2)
	}
	path := filepath.Join(*dir, strings.ReplaceAll(*name, "/", "_")+"-reg.sock")
	info := &registerapi.PluginInfo{Type: *typ, Name: *name, Endpoint: *endpoint, SupportedVersions: strings.Split(*versions, ",")}
	p, err := kubeletplugin.Start(path, info, func(s *registerapi.RegistrationStatus) {
		if s.PluginRegistered {
			fmt.Printf("registered by the agent\n")
		} else {
			fmt.Printf("refused by the agent: %s\n", s.Error)
		}
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("serving %s %s at %s\n", *typ, *name, path)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	p.Stop()
	fmt.Println("stopped; socket removed")
}
