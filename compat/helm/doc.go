// Package helm tests plugreg's Helm chart (deploy/helm/plugreg) with
// Helm's own Go packages (lint, render), in a module of its own so that
// the product's go.mod stays free of Helm and Kubernetes: the chart lints
// clean, and the agents its manifests describe start, as real processes,
// from exactly the arguments and environment the manifests give them
// (docs/kubernetes.md).
package helm
