// Command coredns is CoreDNS with only the plugins the lab's Corefile
// (../../coredns.yaml) needs. The upstream binary links the SDKs of every
// cloud DNS backend: many more modules to download and compile on two
// cores, for nothing a one-host cluster uses. Plugins run in the order of upstream's
// dnsserver.Directives, so that list is filtered rather than rewritten.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

var keep = map[string]bool{"reload": true, "ready": true, "health": true, "prometheus": true, "errors": true,
	"log": true, "loadbalance": true, "cache": true, "hosts": true, "kubernetes": true, "loop": true, "forward": true}

func init() {
	var d []string
	for _, n := range dnsserver.Directives {
		if keep[n] {
			d = append(d, n)
		}
	}
	dnsserver.Directives = d
}

func main() { coremain.Run() }
