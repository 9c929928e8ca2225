package api_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/plugreg/plugreg/api"
)

// Every row of the error table crosses a wire (ToWire, then Err on the
// other side) as itself: a refusal as an error matching its sentinel, an
// availability error as an api.Coded of its code, each with the row's
// outcome, and ToWire of the rebuilt error sends the same again (a relay
// changes nothing). Codes are unique, and every sentinel classifies as its
// own row (a sentinel that wraps another comes first in the table).
func TestEveryErrorKindCrossesTheWire(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range api.ErrorKinds() {
		t.Run(k.Code, func(t *testing.T) {
			if seen[k.Code] {
				t.Fatalf("code %s in two rows", k.Code)
			}
			seen[k.Code] = true
			if k.Status < 400 || k.Outcome == "" {
				t.Fatalf("row %+v: want an HTTP error status and an outcome", k)
			}
			if got := api.KindOfCode(k.Code); got.Code != k.Code || got.Sentinel != k.Sentinel || got.Outcome != k.Outcome || got.Status != k.Status {
				t.Fatalf("KindOfCode(%s) = %+v, want %+v", k.Code, got, k)
			}
			var err error = api.NewError(k.Code, errors.New("detail"))
			if k.Sentinel != nil {
				err = fmt.Errorf("%w: detail", k.Sentinel)
			}
			if got := api.KindOf(err); got.Code != k.Code || got.Outcome != k.Outcome || got.Status != k.Status {
				t.Fatalf("KindOf(%v) = %+v, want the row %+v", err, got, k)
			}
			w := api.ToWire(err).(*api.WireError)
			if w.Code != k.Code || w.Outcome != k.Outcome {
				t.Fatalf("ToWire(%v) = %+v, want code %s outcome %s", err, w, k.Code, k.Outcome)
			}
			back := w.Err()
			if k.Sentinel != nil && !errors.Is(back, k.Sentinel) {
				t.Errorf("rebuilt %v does not match %v", back, k.Sentinel)
			}
			var coded api.Coded
			if k.Sentinel == nil && (!errors.As(back, &coded) || coded.Code() != k.Code || coded.Outcome() != k.Outcome) {
				t.Errorf("rebuilt %v: want an api.Coded %s %s", back, k.Code, k.Outcome)
			}
			if again := api.ToWire(back).(*api.WireError); *again != *w {
				t.Errorf("relayed as %+v, sent as %+v", again, w)
			}
		})
	}
}

// An availability error keeps the outcome it was made with across the
// wire, whatever its code's; a code this binary does not know (a newer
// peer's) is an availability error of unknown outcome, HTTP 503.
func TestErrorOutcomesAndUnknownCodes(t *testing.T) {
	err := api.NewErrorOutcome(api.CodeTimeout, api.NotApplied, errors.New("before proposing"))
	var coded api.Coded
	if back := api.ToWire(err).(*api.WireError).Err(); !errors.As(back, &coded) || coded.Outcome() != api.NotApplied {
		t.Errorf("%v came back as %v", err, back)
	}
	k := api.KindOfCode("from_the_future")
	if k.Sentinel != nil || k.Outcome != api.OutcomeUnknown || k.Status != 503 {
		t.Errorf("unknown code: %+v", k)
	}
	if k := api.KindOf(errors.New("unclassified")); k.Code != api.CodeInternal || k.Status != 500 {
		t.Errorf("unclassified error: %+v", k)
	}
	if !errors.Is(api.ErrACLNotFound, api.ErrPermissionDenied) || api.ErrorCode(api.ErrACLNotFound) != api.CodeACLNotFound {
		t.Errorf("an unknown token is a permission denial of its own code")
	}
}
