package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/api/pluginpb"
)

// The write handlers: a registration, a deregistration (conditional or
// not), a lease renewal and a node's deregistration, each decoded and
// validated here, at the HTTP edge, before the backend sees it.

func (s *Server) writeContext(r *http.Request) (context.Context, context.CancelFunc, error) {
	ctx, err := withRequestID(r)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	return ctx, cancel, nil
}

// withRequestID returns r's context with the write's request ID, if it
// sent one (api.WithRequestID).
func withRequestID(r *http.Request) (context.Context, error) {
	id := r.Header.Get(headerRequest)
	if id == "" {
		return r.Context(), nil
	}
	if len(id) > maxRequestID {
		return nil, fmt.Errorf("%w: %s is %d bytes, at most %d", api.ErrTooLarge, headerRequest, len(id), maxRequestID)
	}
	return api.WithRequestID(r.Context(), id), nil
}

func (s *Server) register(w http.ResponseWriter, r *http.Request) {
	info, err := decodePlugin(r) // the body is bounded by the route's access
	if err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel, err := s.writeContext(r)
	if err != nil {
		writeError(w, err)
		return
	}
	defer cancel()
	res, err := s.be.Register(ctx, info)
	s.writeResult(w, res, err)
}

// decodeJSON decodes exactly one JSON value of v's type from body, with no
// field v does not have.
func decodeJSON(body io.Reader, v interface{}) error {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	if dec.More() {
		return fmt.Errorf("%w: more than one JSON value in the body", api.ErrInvalid)
	}
	return nil
}

// decodePlugin decodes and validates a registration body, JSON or
// protobuf by its Content-Type: what it returns may be proposed as is (a
// bad request is answered without a round trip).
func decodePlugin(r *http.Request) (*api.PluginInfo, error) {
	info := new(api.PluginInfo)
	if isPluginProtobuf(r.Header.Get("Content-Type")) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, decodeError(err)
		}
		if info, err = pluginpb.DecodePlugin(b); err != nil {
			return nil, fmt.Errorf("%w: protobuf body: %v", api.ErrInvalid, err)
		}
	} else if err := decodeJSON(r.Body, info); err != nil {
		return nil, err
	}
	if err := api.ValidateNewPlugin(info); err != nil {
		return nil, err
	}
	return info, nil
}

func isPluginProtobuf(contentType string) bool {
	if len(contentType) < len(api.PluginProtobuf) || !strings.EqualFold(contentType[:len(api.PluginProtobuf)], api.PluginProtobuf) {
		return false // the common case, without parsing
	}
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == api.PluginProtobuf
}

func decodeError(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return fmt.Errorf("%w: body over %d bytes", api.ErrTooLarge, maxBodyBytes)
	}
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: empty body; want a PluginInfo JSON object", api.ErrInvalid)
	}
	return fmt.Errorf("%w: body: %v", api.ErrInvalid, err)
}

// deregister: DELETE /v1/plugins/{type}/{name}/{alloc}[?node=N][&index=M].
// With node and/or index it is conditional: 409 when the instance belongs
// to another node or was changed after index.
func (s *Server) deregister(w http.ResponseWriter, r *http.Request) {
	req := api.DeregisterRequest{Type: r.PathValue("type"), Name: r.PathValue("name"), AllocID: r.PathValue("alloc")}
	v := r.URL.Query()
	if _, ok := v["node"]; ok {
		if req.IfNodeID = v.Get("node"); req.IfNodeID == "" {
			writeError(w, fmt.Errorf("%w: node is empty", api.ErrInvalid))
			return
		}
	}
	if str := v.Get("index"); str != "" {
		n, err := strconv.ParseUint(str, 10, 64)
		if err != nil || n == 0 {
			writeError(w, fmt.Errorf("%w: index %q: want the instance's ModifyIndex, a positive number", api.ErrInvalid, str))
			return
		}
		req.IfModifyIndex = n
	}
	if err := req.Validate(); err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel, err := s.writeContext(r)
	if err != nil {
		writeError(w, err)
		return
	}
	defer cancel()
	res, err := s.be.Deregister(ctx, req)
	s.writeResult(w, res, err)
}

// renew: PUT /v1/plugins/{type}/{name}/{alloc}/renew, no body. The
// leader moves the instance's lease a TTL on and answers {"TTL": "30s"};
// nothing is written to the log. 404 when it holds no such lease.
func (s *Server) renew(w http.ResponseWriter, r *http.Request) {
	req := api.RenewRequest{Type: r.PathValue("type"), Name: r.PathValue("name"), AllocID: r.PathValue("alloc")}
	if err := req.Validate(); err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), writeTimeout)
	defer cancel()
	res, err := s.be.Renew(ctx, req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *Server) deregisterNode(w http.ResponseWriter, r *http.Request) {
	ctx, cancel, err := s.writeContext(r)
	if err != nil {
		writeError(w, err)
		return
	}
	defer cancel()
	if err := api.ValidateIdentifier("node", r.PathValue("node")); err != nil {
		writeError(w, err)
		return
	}
	res, err := s.be.DeregisterNode(ctx, r.PathValue("node"))
	s.writeResult(w, res, err)
}

func (s *Server) writeResult(w http.ResponseWriter, res api.WriteResult, err error) {
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set(headerIndex, strconv.FormatUint(res.Index, 10))
	writeJSON(w, http.StatusOK, res)
}
