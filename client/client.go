package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/api/pluginpb"
	"github.com/plugreg/plugreg/tlsutil"
)

// Config of a Client.
type Config struct {
	// Addrs are node HTTP addresses ("127.0.0.1:7700" or a URL).
	Addrs []string
	// Token is sent as X-Plugreg-Token when set.
	Token string
	// HTTPClient to use; nil means one with sane timeouts.
	HTTPClient *http.Client
	// RetryWait between attempts after a retryable failure (zero: 100ms).
	RetryWait time.Duration
	// DialTimeout bounds each connection attempt (zero: 2s, etcdctl's
	// dial timeout): a node whose host drops the connection's packets
	// costs a call this long before it moves to the next node. Ignored
	// when HTTPClient is set.
	DialTimeout time.Duration
	// TLS configures HTTPS (see tlsutil.ClientConfig): with it, addresses
	// without a scheme are https://. Ignored when HTTPClient is set.
	TLS *tls.Config
	// TLSOptions, when TLS is nil and they are not zero, are the files
	// (and server name) New builds TLS from with tlsutil.ClientConfig:
	// what DefaultConfig reads from PLUGREG_CACERT and the rest.
	TLSOptions tlsutil.ClientOptions
	// Protobuf sends registrations as protobuf (api.PluginProtobuf)
	// instead of JSON: less CPU per write on the client and the server.
	// Off by default, as Kubernetes clients default to JSON: servers older
	// than the release that brought it refuse such a body (400), so turn
	// it on once every server runs it.
	Protobuf bool
}

// DefaultDialTimeout is Config.DialTimeout's zero.
const DefaultDialTimeout = 2 * time.Second

// Client talks to a plugreg cluster. It is safe for concurrent use.
type Client struct {
	addrs []string
	token string
	proto bool
	hc    *http.Client
	wait  time.Duration
	cur   atomic.Int32 // index of the node in use
	// answered: some agent has answered this Client; from then on a
	// refused connection is an agent restarting, not a wrong address.
	answered atomic.Bool
}

// New returns a Client.
func New(cfg Config) (*Client, error) {
	if len(cfg.Addrs) == 0 {
		return nil, errors.New("client: no addresses")
	}
	if cfg.TLS == nil && cfg.TLSOptions != (tlsutil.ClientOptions{}) {
		tc, err := tlsutil.ClientConfig(cfg.TLSOptions)
		if err != nil {
			return nil, fmt.Errorf("client: %w", err)
		}
		cfg.TLS = tc
	}
	c := &Client{token: cfg.Token, proto: cfg.Protobuf, hc: cfg.HTTPClient, wait: cfg.RetryWait}
	for _, a := range cfg.Addrs {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if !strings.Contains(a, "://") {
			if cfg.TLS != nil {
				a = "https://" + a
			} else {
				a = "http://" + a
			}
		}
		u, err := url.Parse(a)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("client: bad address %q", a)
		}
		c.addrs = append(c.addrs, strings.TrimRight(a, "/"))
	}
	if len(c.addrs) == 0 {
		return nil, errors.New("client: no addresses")
	}
	if c.hc == nil {
		dial := cfg.DialTimeout
		if dial <= 0 {
			dial = DefaultDialTimeout
		}
		c.hc = &http.Client{Transport: &http.Transport{
			// A bounded dial: a host that drops SYNs fails within the
			// dial timeout and the call moves on, instead of the OS's
			// minutes.
			DialContext:           (&net.Dialer{Timeout: dial, KeepAlive: 30 * time.Second}).DialContext,
			TLSClientConfig:       cfg.TLS,
			MaxIdleConnsPerHost:   64,
			ResponseHeaderTimeout: 0, // blocking queries and streams wait long
			IdleConnTimeout:       90 * time.Second,
		}}
	}
	if c.wait == 0 {
		c.wait = 100 * time.Millisecond
	}
	return c, nil
}

// Addrs returns the node addresses, the one in use first.
func (c *Client) Addrs() []string {
	n := int(c.cur.Load())
	return append(append([]string(nil), c.addrs[n:]...), c.addrs[:n]...)
}

func (c *Client) next(from int32) {
	c.cur.CompareAndSwap(from, (from+1)%int32(len(c.addrs)))
}

// APIError is an error answer from a node: its HTTP status and body. It
// wraps the error of api's table that the body's code names, so callers
// test it as the servers do: errors.Is(err, api.ErrNotFound),
// api.ErrConflict, api.ErrPermissionDenied (an unknown token's
// api.ErrACLNotFound is one too), api.ErrInvalid, ...; an availability
// failure (a 503) is an api.Coded with its code and outcome.
type APIError struct {
	StatusCode int
	Code       string
	Message    string
	// Outcome: "not_applied" (nothing was done) or "unknown" (a write
	// may have applied).
	Outcome string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%s (%d %s)", e.Message, e.StatusCode, e.Code)
}

// Unwrap is the api error the answer's code stands for; nil for an answer
// without one (not plugreg's: a proxy's).
func (e *APIError) Unwrap() error {
	if e.Code == "" {
		return nil
	}
	return (&api.WireError{Code: e.Code, Outcome: api.Outcome(e.Outcome), Msg: e.Message}).Err()
}

// retryable reports whether another node may answer better.
func retryable(status int) bool {
	return status == http.StatusServiceUnavailable || status == http.StatusBadGateway || status == http.StatusGatewayTimeout
}

// limitedAt reports whether resp is an agent's limit refusal (429 with
// Retry-After; autopilot's 429 for an unhealthy cluster has none): another
// agent may have room.
func limitedAt(resp *http.Response) bool {
	return resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") != ""
}

// isTLSError reports whether err is a TLS refusal: a certificate this
// client does not trust, one the node did not accept, or TLS spoken to a
// plaintext port. Waiting does not cure these; another node might.
func isTLSError(err error) bool {
	// A TLS alert from the peer ("remote error: tls: certificate
	// required") comes as a net.OpError with that Op.
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "remote error" {
		return true
	}
	var (
		alert  tls.AlertError
		verify *tls.CertificateVerificationError
		header tls.RecordHeaderError
		ua     x509.UnknownAuthorityError
		host   x509.HostnameError
		inv    x509.CertificateInvalidError
	)
	return errors.As(err, &alert) || errors.As(err, &verify) || errors.As(err, &header) ||
		errors.As(err, &ua) || errors.As(err, &host) || errors.As(err, &inv)
}

// do sends one logical request, moving through the nodes on connection
// failures and 503s until ctx ends. It returns the response of the first
// node that answered anything else; the caller closes its body. When
// every node has failed in a row for a reason waiting does not cure
// (nothing listens there, the answer is not a plugreg agent's, TLS
// refuses), it ends at once with those failures (ErrNoAgent,
// ErrNotPlugreg, the TLS error).
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body []byte, hdr http.Header) (*http.Response, error) {
	var lastErr error
	// hopeless holds, by address, the failures waiting does not cure,
	// since the last failure that it may: when it holds every address,
	// no node will answer this call.
	hopeless := map[string]error{}
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			wait := c.wait
			if attempt >= len(c.addrs) { // a full round failed: back off a little
				wait *= time.Duration(min(attempt/len(c.addrs)+1, 10))
			}
			select {
			case <-ctx.Done():
				if lastErr == nil {
					lastErr = ctx.Err()
				}
				return nil, fmt.Errorf("%s %s: %w (last error: %w)", method, path, ctx.Err(), lastErr)
			case <-time.After(wait):
			}
		}
		n := c.cur.Load()
		addr := c.addrs[n]
		u := addr + path
		if len(query) > 0 {
			u += "?" + query.Encode()
		}
		req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		for k, v := range hdr {
			req.Header[k] = v
		}
		if c.token != "" {
			req.Header.Set("X-Plugreg-Token", c.token)
		}
		if body != nil && req.Header.Get("Content-Type") == "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := c.hc.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				// The caller's deadline ran out on this node: one that
				// hangs (a paused process, a partition that drops
				// packets) answers nothing before any deadline, so the
				// next call starts on the next node rather than wait
				// on it again.
				c.next(n)
				return nil, fmt.Errorf("%s %s: %w", method, path, err)
			}
			lastErr = err
			c.next(n)
			if isTLSError(err) || (nobodyListens(err) && !c.answered.Load()) {
				if hopeless[addr] = err; len(hopeless) == len(c.addrs) {
					return nil, unreachable(c.addrs, hopeless)
				}
			} else {
				clear(hopeless)
			}
			continue
		}
		if retryable(resp.StatusCode) || limitedAt(resp) {
			c.answered.Store(true)
			lastErr = decodeError(resp)
			clear(hopeless)
			c.next(n)
			continue
		}
		if err := checkPlugreg(addr, resp); err != nil {
			lastErr = err
			c.next(n)
			if hopeless[addr] = err; len(hopeless) == len(c.addrs) {
				return nil, unreachable(c.addrs, hopeless)
			}
			continue
		}
		c.answered.Store(true)
		return resp, nil
	}
}

// checkPlugreg returns ErrNotPlugreg's error, having closed resp, when
// resp is no plugreg agent's answer (notPlugreg); else nil, with resp's
// body as it was.
func checkPlugreg(addr string, resp *http.Response) error {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if resp.StatusCode < 400 && mt != "text/html" {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	if err != nil {
		return nil // the caller reads what there was, and says why it is short
	}
	return notPlugreg(hostOf(addr), resp, b)
}

// maxErrorBody bounds what is read of an error answer.
const maxErrorBody = 64 * 1024

// decodeError is the error an answer with an error status stands for:
// an APIError, or ErrNotPlugreg's when it is not a plugreg agent's.
// answeredBy is the address resp came from, as errors name it.
func answeredBy(resp *http.Response) string {
	return hostOf(resp.Request.URL.Scheme + "://" + resp.Request.URL.Host)
}

func decodeError(resp *http.Response) error {
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	if err := notPlugreg(answeredBy(resp), resp, b); err != nil && !retryable(resp.StatusCode) {
		return err
	}
	var eb struct {
		Error   string `json:"error"`
		Code    string `json:"code"`
		Outcome string `json:"outcome"`
	}
	if json.Unmarshal(b, &eb) != nil || eb.Error == "" {
		eb.Error = strings.TrimSpace(string(b))
	}
	return &APIError{StatusCode: resp.StatusCode, Code: eb.Code, Message: eb.Error, Outcome: eb.Outcome}
}

func (c *Client) decode(resp *http.Response, out interface{}) error {
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return decodeError(resp)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "application/json" {
		// Every answer of plugreg's JSON routes says it is JSON.
		return &notPlugregError{addr: answeredBy(resp), status: resp.StatusCode, contentType: resp.Header.Get("Content-Type")}
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode %s response: %w", resp.Request.URL.Path, err)
	}
	return nil
}

func newRequestID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// write sends a write; body is JSON unless contentType says otherwise.
func (c *Client) write(ctx context.Context, method, path string, body []byte, contentType string) (api.WriteResult, error) {
	hdr := http.Header{}
	if contentType != "" {
		hdr.Set("Content-Type", contentType)
	}
	id := RequestID(ctx)
	if id == "" {
		id = newRequestID()
	}
	hdr.Set("X-Plugreg-Request-Id", id)
	resp, err := c.do(ctx, method, path, nil, body, hdr)
	if err != nil {
		return api.WriteResult{}, err
	}
	var res api.WriteResult
	err = c.decode(resp, &res)
	return res, err
}

// Register registers or updates a plugin instance.
func (c *Client) Register(ctx context.Context, info *api.PluginInfo) (api.WriteResult, error) {
	if c.proto {
		body, err := pluginpb.FromPlugin(info).MarshalVT()
		if err != nil {
			return api.WriteResult{}, err
		}
		return c.write(ctx, http.MethodPost, "/v1/plugins", body, api.PluginProtobuf)
	}
	body, err := json.Marshal(info)
	if err != nil {
		return api.WriteResult{}, err
	}
	return c.write(ctx, http.MethodPost, "/v1/plugins", body, "")
}

// Deregister removes a plugin instance.
func (c *Client) Deregister(ctx context.Context, ptype, name, allocID string) (api.WriteResult, error) {
	return c.write(ctx, http.MethodDelete, "/v1/plugins/"+seg(ptype)+"/"+seg(name)+"/"+seg(allocID), nil, "")
}

// DeregisterIf removes a plugin instance only if it still belongs to
// req.IfNodeID and/or was last changed at req.IfModifyIndex; otherwise it
// fails with an error matching api.ErrConflict and nothing changes.
func (c *Client) DeregisterIf(ctx context.Context, req api.DeregisterRequest) (api.WriteResult, error) {
	v := url.Values{}
	if req.IfNodeID != "" {
		v.Set("node", req.IfNodeID)
	}
	if req.IfModifyIndex != 0 {
		v.Set("index", strconv.FormatUint(req.IfModifyIndex, 10))
	}
	path := "/v1/plugins/" + seg(req.Type) + "/" + seg(req.Name) + "/" + seg(req.AllocID)
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	return c.write(ctx, http.MethodDelete, path, nil, "")
}

// NodePlugins lists every instance registered with nodeID.
func (c *Client) NodePlugins(ctx context.Context, nodeID string, q *QueryOptions) ([]*api.PluginInfo, *QueryMeta, error) {
	var out []*api.PluginInfo
	meta, err := c.query(ctx, "/v1/nodes/"+seg(nodeID)+"/plugins", q, &out)
	return out, meta, err
}

// DeregisterNode removes every plugin instance of a node.
func (c *Client) DeregisterNode(ctx context.Context, nodeID string) (api.WriteResult, error) {
	return c.write(ctx, http.MethodDelete, "/v1/nodes/"+seg(nodeID)+"/plugins", nil, "")
}

func seg(s string) string { return url.PathEscape(s) }

// QueryOptions tune a read.
type QueryOptions struct {
	// Stale reads the answering node's state without a round trip to the
	// leader; it may be behind.
	Stale bool
	// WaitIndex and WaitTime make a blocking query: the answer comes once
	// the type changed past WaitIndex, or after WaitTime.
	WaitIndex uint64
	WaitTime  time.Duration
	// Filter selects the instances of a list (docs/api.md, "Filters"); a
	// bad expression is refused with api.ErrInvalid and its position.
	Filter string
	// PerPage and NextToken page a list: at most PerPage instances,
	// from the one QueryMeta.NextToken of the previous page named.
	PerPage   int
	NextToken string
}

// QueryMeta describes a read's answer.
type QueryMeta struct {
	Index       uint64
	KnownLeader bool
	LastContact time.Duration
	Addr        string // the node that answered
	// NextToken names the first instance of the next page ("": this
	// page is the last).
	NextToken string
}

func (q *QueryOptions) values() url.Values {
	v := url.Values{}
	if q == nil {
		return v
	}
	if q.Stale {
		v.Set("consistency", "stale")
	}
	if q.WaitIndex > 0 {
		v.Set("index", strconv.FormatUint(q.WaitIndex, 10))
	}
	if q.WaitTime > 0 {
		v.Set("wait", q.WaitTime.String())
	}
	if q.Filter != "" {
		v.Set("filter", q.Filter)
	}
	if q.PerPage > 0 {
		v.Set("per_page", strconv.Itoa(q.PerPage))
	}
	if q.NextToken != "" {
		v.Set("next_token", q.NextToken)
	}
	return v
}

func (c *Client) query(ctx context.Context, path string, q *QueryOptions, out interface{}) (*QueryMeta, error) {
	return c.queryValues(ctx, path, q.values(), out)
}

// queryValues is query with the parameters already encoded (a read with
// its own parameters adds them to q.values()).
func (c *Client) queryValues(ctx context.Context, path string, v url.Values, out interface{}) (*QueryMeta, error) {
	resp, err := c.do(ctx, http.MethodGet, path, v, nil, nil)
	if err != nil {
		return nil, err
	}
	meta := &QueryMeta{Addr: resp.Request.URL.Host}
	meta.Index, _ = strconv.ParseUint(resp.Header.Get("X-Plugreg-Index"), 10, 64)
	meta.KnownLeader = resp.Header.Get("X-Plugreg-Known-Leader") == "true"
	ms, _ := strconv.ParseInt(resp.Header.Get("X-Plugreg-Last-Contact"), 10, 64)
	meta.LastContact = time.Duration(ms) * time.Millisecond
	meta.NextToken = resp.Header.Get("X-Plugreg-NextToken")
	return meta, c.decode(resp, out)
}

// Types lists the plugin types.
func (c *Client) Types(ctx context.Context, q *QueryOptions) ([]string, *QueryMeta, error) {
	var out []string
	meta, err := c.query(ctx, "/v1/types", q, &out)
	return out, meta, err
}

// List returns the newest instance of every name of ptype, sorted by name.
func (c *Client) List(ctx context.Context, ptype string, q *QueryOptions) ([]*api.PluginInfo, *QueryMeta, error) {
	var out []*api.PluginInfo
	meta, err := c.query(ctx, "/v1/plugins/"+seg(ptype), q, &out)
	return out, meta, err
}

// Coverage returns which live nodes have an instance of ptype and which
// lack one (docs/api.md, "Coverage"), counting every member.
func (c *Client) Coverage(ctx context.Context, ptype string, q *QueryOptions) (*api.Coverage, *QueryMeta, error) {
	return c.CoverageOfRole(ctx, ptype, "", q)
}

// CoverageOfRole is Coverage counting only the members of role
// (api.RoleClient or api.RoleServer; "" for every member).
func (c *Client) CoverageOfRole(ctx context.Context, ptype, role string, q *QueryOptions) (*api.Coverage, *QueryMeta, error) {
	v := q.values()
	if role != "" {
		v.Set("role", role)
	}
	var out api.Coverage
	meta, err := c.queryValues(ctx, "/v1/coverage/"+seg(ptype), v, &out)
	if err != nil {
		return nil, meta, err
	}
	return &out, meta, nil
}

// Instances returns the recency list of (ptype, name), newest first.
func (c *Client) Instances(ctx context.Context, ptype, name string, q *QueryOptions) ([]*api.PluginInfo, *QueryMeta, error) {
	var out []*api.PluginInfo
	meta, err := c.query(ctx, "/v1/plugins/"+seg(ptype)+"/"+seg(name), q, &out)
	return out, meta, err
}

// Get returns one instance.
func (c *Client) Get(ctx context.Context, ptype, name, allocID string, q *QueryOptions) (*api.PluginInfo, *QueryMeta, error) {
	var out api.PluginInfo
	meta, err := c.query(ctx, "/v1/plugins/"+seg(ptype)+"/"+seg(name)+"/"+seg(allocID), q, &out)
	if err != nil {
		return nil, meta, err
	}
	return &out, meta, nil
}

// Members lists the gossip pool as the answering node sees it.
func (c *Client) Members(ctx context.Context) ([]api.Member, error) {
	var out []api.Member
	_, err := c.query(ctx, "/v1/members", nil, &out)
	return out, err
}

// Leader returns the leader's server address, "" when there is none.
func (c *Client) Leader(ctx context.Context) (string, error) {
	var out string
	_, err := c.query(ctx, "/v1/status/leader", nil, &out)
	return out, err
}

// Peers returns the server addresses in the Raft configuration.
func (c *Client) Peers(ctx context.Context) ([]string, error) {
	var out []string
	_, err := c.query(ctx, "/v1/status/peers", nil, &out)
	return out, err
}

// Leave asks the first configured node (only that one: leaving is about a
// particular node) to leave the cluster gracefully.
func (c *Client) Leave(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.addrs[0]+"/v1/agent/leave", nil)
	if err != nil {
		return err
	}
	if c.token != "" {
		req.Header.Set("X-Plugreg-Token", c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("leave %s: %w", c.addrs[0], err)
	}
	var out map[string]string
	return c.decode(resp, &out)
}

// WithRequestID makes the write it is passed to carry id instead of a fresh
// one: use it to retry a write across process restarts.
func WithRequestID(ctx context.Context, id string) context.Context {
	return api.WithRequestID(ctx, id)
}

// RequestID returns the ID set by WithRequestID, or "".
func RequestID(ctx context.Context) string { return api.RequestID(ctx) }
