package main

import (
	"testing"

	"github.com/plugreg/plugreg/internal/proctest"
)

func TestMain(m *testing.M) { proctest.Main(m) }
