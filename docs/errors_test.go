package docs_test

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/plugreg/plugreg/api"
)

// docs/api.md's error table is api's (api.ErrorKinds): a row per code, with
// the code's HTTP status, outcome and sentinel, and no code the table does
// not have.
func TestAPIErrorTableIsCurrent(t *testing.T) {
	b, err := os.ReadFile("api.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(b)[strings.Index(string(b), "## Errors\n"):]
	section = section[:strings.Index(section[1:], "\n## ")+1]
	documented := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 6 {
			continue
		}
		status, err := strconv.Atoi(strings.TrimSpace(cells[1]))
		if err != nil {
			continue // the header
		}
		code := strings.Trim(strings.TrimSpace(cells[2]), "`")
		outcome := strings.Trim(strings.TrimSpace(cells[3]), "`")
		sentinel := strings.TrimSpace(cells[4])
		k := api.KindOfCode(code)
		want := ""
		if k.Sentinel != nil {
			want = sentinelName[k.Sentinel]
		}
		if status != k.Status || outcome != string(k.Outcome) || sentinel != want {
			t.Errorf("api.md: %d %s %s %q; api's table: %d %s %s %q", status, code, outcome, sentinel, k.Status, k.Code, k.Outcome, want)
		}
		if documented[code] {
			t.Errorf("api.md: %s in two rows", code)
		}
		documented[code] = true
	}
	for _, k := range api.ErrorKinds() {
		if !documented[k.Code] {
			t.Errorf("api.md: no row for %s", k.Code)
		}
		if k.Sentinel != nil && sentinelName[k.Sentinel] == "" {
			t.Errorf("sentinel of %s has no name here", k.Code)
		}
	}
}

var sentinelName = map[error]string{
	api.ErrInvalid:          "`ErrInvalid`",
	api.ErrMalformed:        "`ErrMalformed`",
	api.ErrTooLarge:         "`ErrTooLarge`",
	api.ErrNotFound:         "`ErrNotFound`",
	api.ErrConflict:         "`ErrConflict`",
	api.ErrACLNotFound:      "`ErrACLNotFound`",
	api.ErrPermissionDenied: "`ErrPermissionDenied`",
	api.ErrACLBootstrapped:  "`ErrACLBootstrapped`",
	api.ErrUnsupported:      "`ErrUnsupported`",
	api.ErrTooManyRequests:  "`ErrTooManyRequests`",
	api.ErrUnknownCommand:   "`ErrUnknownCommand`",
}
