package main

import (
	"github.com/plugreg/plugreg/internal/buildinfo"
)

func runVersion(args []string) error {
	cf := newClientFlags("version", "", "Prints plugreg's version: the module version, the VCS revision it was built from, and the Go version.")
	if err := cf.parse(args, 0); err != nil {
		return err
	}
	b := buildinfo.Read()
	return cf.out.print(b, lines([]string{b.String()}))
}
