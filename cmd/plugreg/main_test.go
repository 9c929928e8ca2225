package main

import (
	"testing"

	"github.com/plugreg/plugreg/tests/framework/proctest"
)

func TestMain(m *testing.M) { proctest.Main(m) }
