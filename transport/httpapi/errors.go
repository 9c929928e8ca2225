package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/plugreg/plugreg/cluster"
	"github.com/plugreg/plugreg/fsm"
	"github.com/plugreg/plugreg/registry"
)

// ErrorBody is the JSON of every error response. Outcome is set on failed
// writes: "not_applied" (safe to retry) or "unknown" (retry only with the
// same request ID).
type ErrorBody struct {
	Error   string `json:"error"`
	Code    string `json:"code"`
	Outcome string `json:"outcome,omitempty"`
}

// Codes of errors that are not cluster errors.
const (
	CodeInvalid     = "invalid"
	CodeTooLarge    = "too_large"
	CodeNotFound    = "not_found"
	CodeInternal    = "internal"
	CodeUnavailable = "unavailable"
	// CodeUnknownCommand: the leader's binary does not know the command
	// (a rolling upgrade in progress).
	CodeUnknownCommand = "unknown_command"
)

func writeError(w http.ResponseWriter, err error) {
	status, body := classify(err)
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, status, body)
}

func classify(err error) (int, ErrorBody) {
	body := ErrorBody{Error: err.Error()}
	var ce *cluster.Error
	var mbe *http.MaxBytesError
	switch {
	case errors.Is(err, fsm.ErrTooLarge), errors.As(err, &mbe):
		body.Code = CodeTooLarge
		return http.StatusRequestEntityTooLarge, body
	case errors.Is(err, fsm.ErrInvalid), errors.Is(err, fsm.ErrMalformed), errors.Is(err, errBadRequest):
		body.Code = CodeInvalid
		return http.StatusBadRequest, body
	case errors.Is(err, fsm.ErrUnknownCommand):
		// Version skew: the leader runs a binary that does not know
		// this command. Nothing was applied; retry after the upgrade.
		body.Code, body.Outcome = CodeUnknownCommand, string(cluster.NotApplied)
		return http.StatusServiceUnavailable, body
	case errors.Is(err, registry.ErrNotFound):
		body.Code = CodeNotFound
		return http.StatusNotFound, body
	case errors.As(err, &ce):
		body.Code, body.Outcome = ce.Code(), string(ce.Outcome())
		return http.StatusServiceUnavailable, body
	case errors.Is(err, registry.ErrShutdown), errors.Is(err, cluster.ErrShutdown):
		body.Code, body.Outcome = cluster.CodeShutdown, string(cluster.OutcomeUnknown)
		return http.StatusServiceUnavailable, body
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		body.Code, body.Outcome = cluster.CodeTimeout, string(cluster.OutcomeUnknown)
		return http.StatusServiceUnavailable, body
	}
	body.Code = CodeInternal
	return http.StatusInternalServerError, body
}

var errBadRequest = errors.New("bad request")

func writeJSON(w http.ResponseWriter, status int, v interface{}) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.Encode(v)
}
