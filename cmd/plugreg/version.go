package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// buildInfo is what the Go toolchain stamped into the binary: the main
// module's version ("(devel)" from a work tree, v1.2.3 from `go install
// ...@v1.2.3`) and, when built from a VCS checkout, the revision.
type buildInfo struct {
	Version   string
	Revision  string `json:",omitempty"`
	Time      string `json:",omitempty"`
	Modified  bool   `json:",omitempty"`
	GoVersion string
	Platform  string
}

func readBuildInfo() buildInfo {
	out := buildInfo{Version: "unknown", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
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

func (b buildInfo) String() string {
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

func runVersion(args []string) error {
	cf := newClientFlags("version", "", "Prints plugreg's version: the module version, the VCS revision it was built from, and the Go version.")
	if err := cf.parse(args, 0); err != nil {
		return err
	}
	b := readBuildInfo()
	if *cf.json {
		return printJSON(b)
	}
	fmt.Println(b)
	return nil
}
