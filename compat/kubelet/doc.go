// Package kubelet tests plugreg's kubelet-protocol plugin discovery
// (agent/pluginwatcher) against the real Kubernetes DRA kubelet-plugin
// helper, k8s.io/dynamic-resource-allocation/kubeletplugin, in process and
// against real plugreg agent processes built from the repository. It is a
// module of its own so that the product never depends on client-go; see
// README.md.
package kubelet
