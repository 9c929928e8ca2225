package main

import (
	"testing"

	"github.com/plugreg/plugreg/internal/testing/proctest"
)

func TestMain(m *testing.M) { proctest.Main(m) }
