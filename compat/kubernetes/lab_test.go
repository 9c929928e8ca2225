//go:build linux

// Package kubernetes runs the chart in a real Kubernetes: the lab that
// lab/lab.sh brings up on this machine (three kubelets, each with its
// own containerd, built from the published Go modules). Without a lab
// (PLUGREG_K8S_LAB unset) the test is skipped: a cold build of
// Kubernetes takes about ten minutes, so CI does not run it; README.md
// says how to, and docs/kubernetes.md holds its last run.
package kubernetes

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

const (
	namespace = "plugins"
	release   = "reg"
)

// lab is the running lab cluster: its home, and the tools on PATH.
type lab struct {
	t    *testing.T
	home string // LAB_HOME
	repo string // the repository's root
	// stubImage is examples/stub-plugin's image, once built (sdkPlugin).
	stubImage string
}

func newLab(t *testing.T) *lab {
	home := os.Getenv("PLUGREG_K8S_LAB")
	if home == "" {
		t.Skip("no lab cluster: bring one up with compat/kubernetes/lab/lab.sh up and set PLUGREG_K8S_LAB to its LAB_HOME (README.md)")
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"kubectl", "helm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not on PATH: eval \"$(compat/kubernetes/lab/lab.sh env)\" first", tool)
		}
	}
	return &lab{t: t, home: home, repo: repo}
}

// run runs a command and returns its stdout; a failure stops the test
// with both streams.
func (l *lab) run(name string, args ...string) string {
	l.t.Helper()
	out, err := l.try(name, args...)
	if err != nil {
		l.t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	return out
}

// try runs a command, and returns its stdout and, if it failed, an error
// holding its stderr.
func (l *lab) try(name string, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Dir = l.repo
	start := time.Now()
	err := cmd.Run()
	l.t.Logf("$ %s %s (%v)", name, strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	if err != nil {
		return stdout.String(), fmt.Errorf("%w: %s%s", err, stderr.String(), stdout.String())
	}
	return stdout.String(), nil
}

func (l *lab) kubectl(args ...string) string {
	l.t.Helper()
	return l.run("kubectl", append([]string{"-n", namespace}, args...)...)
}

// eventually polls f until it is true, or fails after d saying what.
func (l *lab) eventually(d time.Duration, what string, f func() bool) {
	l.t.Helper()
	deadline := time.Now().Add(d)
	for !f() {
		if time.Now().After(deadline) {
			l.t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(time.Second)
	}
}

// image builds plugreg's image as deploy/image assembles it (a static
// binary, the Dockerfile's config), names it localhost/plugreg:TAG, and
// imports it into every node's containerd.
func (l *lab) image(tag string) string {
	l.t.Helper()
	dir := l.t.TempDir()
	bin := filepath.Join(dir, "plugreg")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/plugreg")
	build.Dir, build.Env = l.repo, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		l.t.Fatalf("build plugreg: %v\n%s", err, out)
	}
	ref := "localhost/plugreg:" + tag
	layout := filepath.Join(dir, "oci")
	assemble := exec.Command("go", "run", ".", "-bin", bin, "-out", layout, "-tag", ref)
	assemble.Dir = filepath.Join(l.repo, "deploy/image")
	if out, err := assemble.CombinedOutput(); err != nil {
		l.t.Fatalf("assemble the image: %v\n%s", err, out)
	}
	tarball := filepath.Join(dir, "plugreg-"+tag+".tar")
	l.run("tar", "-C", layout, "-cf", tarball, ".")
	l.run(filepath.Join(l.repo, "compat/kubernetes/lab/lab.sh"), "load-image", tarball)
	return ref
}

// binaryImage packs one static binary of this repository's as an image
// of its own (a test plugin), with the lab's mkimage.
func (l *lab) binaryImage(pkg, name, tag string) string {
	l.t.Helper()
	dir := l.t.TempDir()
	bin := filepath.Join(dir, name)
	build := exec.Command("go", "build", "-trimpath", "-o", bin, pkg)
	build.Dir, build.Env = l.repo, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		l.t.Fatalf("build %s: %v\n%s", pkg, err, out)
	}
	ref := "localhost/" + name + ":" + tag
	tarball := filepath.Join(dir, name+".tar")
	l.run(filepath.Join(l.home, "bin/mkimage"), "-o", tarball, "-tag", ref, "-file", bin+":/usr/local/bin/"+name+":0755", "-entrypoint", "/usr/local/bin/"+name)
	l.run(filepath.Join(l.repo, "compat/kubernetes/lab/lab.sh"), "load-image", tarball)
	return ref
}

// podsReady reports whether every pod with selector is Ready, and how many.
func (l *lab) podsReady(selector string) (bool, int) {
	out, err := l.try("kubectl", "-n", namespace, "get", "pods", "-l", selector, "-o", "json")
	if err != nil {
		return false, 0
	}
	var list struct {
		Items []struct {
			Metadata struct{ DeletionTimestamp *string } `json:"metadata"`
			Status   struct {
				Conditions []struct{ Type, Status string }
			}
		}
	}
	if json.Unmarshal([]byte(out), &list) != nil || len(list.Items) == 0 {
		return false, 0
	}
	for _, p := range list.Items {
		if p.Metadata.DeletionTimestamp != nil {
			return false, len(list.Items)
		}
		ready := false
		for _, c := range p.Status.Conditions {
			if c.Type == "Ready" && c.Status == "True" {
				ready = true
			}
		}
		if !ready {
			return false, len(list.Items)
		}
	}
	return true, len(list.Items)
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// logServerTimeline logs where a rolling restart's time went, server by
// server in the order they were created: the old pod's termination (from
// the previous pod Ready to this one's creation: the StatefulSet replaces
// a pod only once the old one is gone), scheduling and the init
// container, the container's start, and its readiness (the probe passes
// once the server knows a leader and has caught up).
func (l *lab) logServerTimeline(t *testing.T, since time.Time) {
	out, err := l.try("kubectl", "-n", namespace, "get", "pods", "-l", servers, "-o", "json")
	if err != nil {
		t.Logf("server timeline: %v", err)
		return
	}
	var list struct {
		Items []struct {
			Metadata struct {
				Name              string
				CreationTimestamp time.Time `json:"creationTimestamp"`
			} `json:"metadata"`
			Status struct {
				Conditions []struct {
					Type               string
					LastTransitionTime time.Time `json:"lastTransitionTime"`
				}
				ContainerStatuses []struct {
					State struct {
						Running *struct {
							StartedAt time.Time `json:"startedAt"`
						}
					}
				} `json:"containerStatuses"`
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Logf("server timeline: %v", err)
		return
	}
	sort.Slice(list.Items, func(i, j int) bool {
		return list.Items[i].Metadata.CreationTimestamp.Before(list.Items[j].Metadata.CreationTimestamp)
	})
	prev := since
	for _, p := range list.Items {
		var initialized, ready, started time.Time
		for _, c := range p.Status.Conditions {
			switch c.Type {
			case "Initialized":
				initialized = c.LastTransitionTime
			case "Ready":
				ready = c.LastTransitionTime
			}
		}
		if cs := p.Status.ContainerStatuses; len(cs) > 0 && cs[0].State.Running != nil {
			started = cs[0].State.Running.StartedAt
		}
		created := p.Metadata.CreationTimestamp
		t.Logf("%s: old pod gone %s, scheduled and initialized %s, started %s, Ready %s (total %s)", p.Metadata.Name,
			created.Sub(prev), initialized.Sub(created), started.Sub(initialized), ready.Sub(started), ready.Sub(prev))
		prev = ready
	}
}
