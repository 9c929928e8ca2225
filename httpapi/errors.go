package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/plugreg/plugreg/api"
)

// ErrorBody is the JSON of every error response. Outcome is set on failed
// writes: "not_applied" (safe to retry) or "unknown" (retry only with the
// same request ID).
type ErrorBody struct {
	Error   string `json:"error"`
	Code    string `json:"code"`
	Outcome string `json:"outcome,omitempty"`
}

func writeError(w http.ResponseWriter, err error) {
	status, body := classify(err)
	switch status {
	case http.StatusServiceUnavailable:
		w.Header().Set("Retry-After", "1")
	case http.StatusTooManyRequests:
		w.Header().Set("Retry-After", retryAfterLimited)
	}
	writeJSON(w, status, body)
}

// writeOperatorError answers a failed operator call: 409 with code unless
// the error is one classify knows better.
func writeOperatorError(w http.ResponseWriter, err error, code string) {
	if status, body := classify(err); status != http.StatusInternalServerError {
		writeJSON(w, status, body)
		return
	}
	writeJSON(w, http.StatusConflict, ErrorBody{Error: err.Error(), Code: code})
}

func classify(err error) (int, ErrorBody) {
	body := ErrorBody{Error: err.Error()}
	var coded api.Coded
	var mbe *http.MaxBytesError
	switch {
	case errors.Is(err, api.ErrTooManyRequests):
		body.Code, body.Outcome = api.CodeTooManyRequests, string(api.NotApplied)
		return http.StatusTooManyRequests, body
	case errors.Is(err, api.ErrTooLarge), errors.As(err, &mbe):
		body.Code = api.CodeTooLarge
		return http.StatusRequestEntityTooLarge, body
	case errors.Is(err, api.ErrInvalid), errors.Is(err, api.ErrMalformed), errors.Is(err, errBadRequest):
		body.Code = api.CodeInvalid
		return http.StatusBadRequest, body
	case errors.Is(err, api.ErrPermissionDenied):
		body.Code, body.Outcome = api.CodePermissionDenied, string(api.NotApplied)
		return http.StatusForbidden, body
	case errors.Is(err, api.ErrACLNotFound):
		body.Code, body.Outcome = api.CodeACLNotFound, string(api.NotApplied)
		return http.StatusForbidden, body
	case errors.Is(err, api.ErrACLBootstrapped):
		body.Code, body.Outcome = api.CodeACLBootstrapped, string(api.NotApplied)
		return http.StatusConflict, body
	case errors.Is(err, api.ErrUnknownCommand):
		// Version skew: the leader runs a binary that does not know
		// this command. Nothing was applied; retry after the upgrade.
		body.Code, body.Outcome = api.CodeUnknownCommand, string(api.NotApplied)
		return http.StatusServiceUnavailable, body
	case errors.Is(err, api.ErrNotFound):
		body.Code = api.CodeNotFound
		return http.StatusNotFound, body
	case errors.Is(err, api.ErrConflict):
		body.Code, body.Outcome = api.CodeConflict, string(api.NotApplied)
		return http.StatusConflict, body
	case errors.Is(err, api.ErrUnsupported):
		body.Code = api.CodeUnsupported
		return http.StatusNotImplemented, body
	case errors.As(err, &coded):
		body.Code, body.Outcome = coded.Code(), string(coded.Outcome())
		return http.StatusServiceUnavailable, body
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		body.Code, body.Outcome = api.CodeTimeout, string(api.OutcomeUnknown)
		return http.StatusServiceUnavailable, body
	}
	body.Code = api.CodeInternal
	return http.StatusInternalServerError, body
}

var errBadRequest = errors.New("bad request")

func writeJSON(w http.ResponseWriter, status int, v interface{}) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.Encode(v)
}
