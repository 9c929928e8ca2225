//go:build tools

// Package tools pins the Kubernetes commands lab.sh builds, so that
// `go mod tidy` keeps k8s.io/kubernetes and its staging modules in go.mod.
// k8s.io/kubernetes is not meant to be imported: its go.mod requires every
// staging module (k8s.io/api, k8s.io/kubelet, ...) at v0.0.0 and replaces
// them with ./staging paths that do not exist in the module zip. The
// replace block in go.mod points each at its published v0.34.4 instead;
// without it nothing resolves.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
