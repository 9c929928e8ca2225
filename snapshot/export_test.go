package snapshot

import "io"

// Write writes an archive of state (an fsm.WriteState stream) to w,
// filling meta's Format, Version, StateSize and StateSHA256.
func Write(w io.Writer, meta Meta, state []byte) error {
	return write(w, meta, func(w io.Writer) error {
		_, err := w.Write(state)
		return err
	})
}
