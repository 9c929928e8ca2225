package httpapi

import (
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/plugreg/plugreg/api"
)

// maxSnapshotBody bounds a restore's upload (the archive is gzipped: a
// registry of a million instances is far below it).
const maxSnapshotBody = 512 << 20

// snapshotSave answers GET /v1/operator/snapshot with an archive of the
// registry (?stale: the answering server's state without a read barrier).
func (s *Server) snapshotSave(w http.ResponseWriter, r *http.Request) {
	var q api.Query
	if err := parseQuery(r, &q); err != nil {
		writeError(w, err)
		return
	}
	write, err := s.be.SnapshotSave(r.Context(), q.Consistency == api.Stale)
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/gzip")
	w.Header().Set("Content-Disposition", `attachment; filename="plugreg.snap"`)
	w.WriteHeader(http.StatusOK)
	if err := write(w); err != nil {
		// Too late for a status: the archive breaks off, and its reader
		// refuses it as truncated.
		s.logger.Warn("snapshot save: the archive broke off", "error", err)
		panic(http.ErrAbortHandler)
	}
}

// snapshotRestore answers PUT /v1/operator/snapshot: the body is an
// archive that replaces the registry (see cluster.Backend.SnapshotRestore).
func (s *Server) snapshotRestore(w http.ResponseWriter, r *http.Request) {
	// An archive may take minutes to upload (bodyDeadline clears the
	// deadline once it is read).
	http.NewResponseController(w).SetReadDeadline(time.Now().Add(restoreReadTimeout))
	archive, err := io.ReadAll(r.Body) // bounded by its route's access
	if err != nil {
		writeError(w, err)
		return
	}
	// No write timeout: a large archive takes minutes to replicate and
	// apply (the backend bounds it).
	ctx, err := withRequestID(r)
	if err != nil {
		writeError(w, err)
		return
	}
	res, err := s.be.SnapshotRestore(ctx, archive)
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set(headerIndex, strconv.FormatUint(res.Index, 10))
	writeJSON(w, http.StatusOK, res)
}
