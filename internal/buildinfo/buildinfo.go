// Package buildinfo is what the Go toolchain stamped into the binary, for
// `plugreg version` and /v1/agent/self alike.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Info is the main module's version ("(devel)" from a work tree, v1.2.3
// from `go install ...@v1.2.3`) and, when built from a VCS checkout, the
// revision, its time and whether the tree was modified.
type Info struct {
	Version   string
	Revision  string `json:",omitempty"`
	Time      string `json:",omitempty"`
	Modified  bool   `json:",omitempty"`
	GoVersion string
	Platform  string
}

// Read returns the running binary's Info.
func Read() Info {
	out := Info{Version: "unknown", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return out
	}
	out.Version = bi.Main.Version
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			out.Revision = s.Value
		case "vcs.time":
			out.Time = s.Value
		case "vcs.modified":
			out.Modified = s.Value == "true"
		}
	}
	return out
}

// String is the version line and the Go line, as `plugreg version` prints.
func (b Info) String() string {
	s := "plugreg " + b.Version
	if b.Revision != "" {
		s += " (" + b.Revision
		if b.Modified {
			s += ", modified"
		}
		if b.Time != "" {
			s += ", " + b.Time
		}
		s += ")"
	}
	return s + "\n" + b.GoVersion + " " + b.Platform
}
