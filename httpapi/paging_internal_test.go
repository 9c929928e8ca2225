package httpapi

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/filter"
)

// A filtered list stops evaluating when its client leaves: the request's
// context ends, and page answers its error, not a list.
func TestListPageStopsWhenTheClientLeaves(t *testing.T) {
	f, err := filter.Compile(`Name matches "^n"`)
	if err != nil {
		t.Fatal(err)
	}
	in := make([]*api.PluginInfo, 1000)
	for i := range in {
		in[i] = &api.PluginInfo{Type: "csi", Name: fmt.Sprintf("n%04d", i), AllocID: "a"}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, perPage := range []int{0, 10} {
		out, _, err := listParams{filter: f, perPage: perPage}.page(ctx, in, byName)
		if !errors.Is(err, context.Canceled) || out != nil {
			t.Errorf("per_page %d: %d instances, %v; want context.Canceled", perPage, len(out), err)
		}
	}
}
