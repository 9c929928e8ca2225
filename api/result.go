package api

import "context"

// Result is what a write did.
type Result string

const (
	ResultRegistered   Result = "registered"
	ResultUpdated      Result = "updated"
	ResultUnchanged    Result = "unchanged"
	ResultDeregistered Result = "deregistered"
	ResultAbsent       Result = "absent"
	// ResultRestored: an operator's backup replaced the whole registry.
	ResultRestored Result = "restored"
)

type requestIDKey struct{}

// WithRequestID returns a context that makes the write it is passed to
// carry id: a retry with the same ID applies at most once.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID returns the request ID set by WithRequestID, or "".
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}
