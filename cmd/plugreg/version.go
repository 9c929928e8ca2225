package main

import (
	"fmt"

	"github.com/plugreg/plugreg/internal/buildinfo"
)

func runVersion(args []string) error {
	cf := newClientFlags("version", "", "Prints plugreg's version: the module version, the VCS revision it was built from, and the Go version.")
	if err := cf.parse(args, 0); err != nil {
		return err
	}
	b := buildinfo.Read()
	if *cf.json {
		return printJSON(b)
	}
	fmt.Println(b)
	return nil
}
