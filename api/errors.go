package api

import "errors"

var (
	// ErrInvalid marks a request that fails validation. It is wrapped with
	// the field at fault; test with errors.Is.
	ErrInvalid = errors.New("plugreg: invalid request")

	// ErrTooLarge marks a request over one of the size limits.
	ErrTooLarge = errors.New("plugreg: request too large")
)
