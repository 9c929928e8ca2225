// Command pause is the lab's sandbox ("infra") container: it holds a pod's
// namespaces until the kubelet stops the pod. There is no registry to pull
// registry.k8s.io/pause from, so lab.sh builds this and packs it with
// mkimage. It reaps zombies because it is PID 1 of the pod's PID namespace
// when a pod sets shareProcessNamespace.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s == syscall.SIGCHLD {
			for {
				var ws syscall.WaitStatus
				pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
			continue
		}
		os.Exit(0)
	}
}
