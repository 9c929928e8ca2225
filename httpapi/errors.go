package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/plugreg/plugreg/api"
)

// ErrorBody is the JSON of every error response. Outcome says what the
// request did: "not_applied" (safe to retry) or "unknown" (a write may have
// applied: retry only with the same request ID); api's error table gives
// each code its own.
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

// classify is err's row of api's error table: the status, code and outcome
// it is answered with.
func classify(err error) (int, ErrorBody) {
	k := api.KindOf(err)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		k = api.KindOfCode(api.CodeTooLarge) // a body over its route's bound
	}
	return k.Status, ErrorBody{Error: err.Error(), Code: k.Code, Outcome: string(k.Outcome)}
}

func writeJSON(w http.ResponseWriter, status int, v interface{}) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.Encode(v)
}
