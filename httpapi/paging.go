package httpapi

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/filter"
)

// Lists take ?filter= (package filter) and are paged with ?per_page=N
// and ?next_token=T, as Nomad's are: the answer's X-Plugreg-NextToken
// names the first instance of the next page, by the list's sort key, so
// a page is not shifted by writes between requests; a token whose
// instance is gone starts at the next instance in order. Filtering comes
// first: a page holds per_page matching instances.

const (
	headerNextToken = "X-Plugreg-NextToken"
	// maxPerPage bounds a page (a page of 1000 instances is ~235 KB).
	maxPerPage = 1000
)

// listOrder is the order a list kind is answered in, and the key that
// names an instance's place in it.
type listOrder struct {
	key     func(*api.PluginInfo) []string
	compare func(a, b []string) int
}

var (
	// byName: a type's list, one instance per name, by name.
	byName = listOrder{key: func(p *api.PluginInfo) []string { return []string{p.Name} }, compare: slices.Compare[[]string]}
	// byNodeKey: a node's instances, by type, name, alloc.
	byNodeKey = listOrder{key: func(p *api.PluginInfo) []string { return []string{p.Type, p.Name, p.AllocID} }, compare: slices.Compare[[]string]}
	// byRecency: a name's instances, newest first (ModifyIndex strictly
	// decreasing along the list).
	byRecency = listOrder{
		key: func(p *api.PluginInfo) []string { return []string{strconv.FormatUint(p.ModifyIndex, 10)} },
		compare: func(a, b []string) int {
			x, _ := strconv.ParseUint(a[0], 10, 64)
			y, _ := strconv.ParseUint(b[0], 10, 64)
			return cmp.Compare(y, x)
		},
	}
)

// listParams are a list request's filter and page.
type listParams struct {
	filter  *filter.Filter
	perPage int      // 0: every instance
	next    []string // the first instance's key; nil: from the start
}

// plain reports whether the request asks for the whole list as is.
func (p listParams) plain() bool { return p.filter == nil && p.perPage == 0 && p.next == nil }

// parseList reads ?filter=, ?per_page= and ?next_token= (compiling the
// filter once for the request).
func parseList(r *http.Request) (listParams, error) {
	var lp listParams
	v := r.URL.Query()
	f, err := filter.Compile(v.Get("filter"))
	if err != nil {
		return lp, err
	}
	lp.filter = f
	if s := v.Get("per_page"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxPerPage {
			return lp, fmt.Errorf("%w: per_page %q: want 1 to %d", api.ErrInvalid, s, maxPerPage)
		}
		lp.perPage = n
	}
	if s := v.Get("next_token"); s != "" {
		parts := strings.Split(s, "/")
		for i, part := range parts {
			if parts[i], err = url.PathUnescape(part); err != nil {
				return lp, fmt.Errorf("%w: next_token %q: %v", api.ErrInvalid, s, err)
			}
		}
		lp.next = parts
	}
	return lp, nil
}

// token encodes a key as X-Plugreg-NextToken: its parts path-escaped
// (ASCII, a header value whatever the names hold), joined by '/', which
// no identifier contains.
func token(key []string) string {
	parts := make([]string, len(key))
	for i, k := range key {
		parts[i] = url.PathEscape(k)
	}
	return strings.Join(parts, "/")
}

// page cuts the page lp asks for from in, filtered; next is the token of
// the page after it ("" when this is the last). The filtered list is a
// subsequence of in, in its order, so the page starts at the token's
// place in in, and the filter runs over what the page needs (one more
// than per_page, to find the next token), not over the whole list: a
// client walking a long list pays for each page once. The filter stops
// when the client leaves (ctx).
func (lp listParams) page(ctx context.Context, in []*api.PluginInfo, order listOrder) (out []*api.PluginInfo, next string, err error) {
	if lp.next != nil {
		if len(lp.next) != len(order.key(&api.PluginInfo{})) {
			return nil, "", fmt.Errorf("%w: next_token %q is not a token of this list", api.ErrInvalid, token(lp.next))
		}
		from, _ := slices.BinarySearchFunc(in, lp.next, func(p *api.PluginInfo, key []string) int { return order.compare(order.key(p), key) })
		in = in[from:]
	}
	limit := 0
	if lp.perPage > 0 {
		limit = lp.perPage + 1
	}
	out, err = lp.filter.Plugins(ctx, in, limit)
	if err != nil {
		return nil, "", err
	}
	if lp.perPage > 0 && len(out) > lp.perPage {
		next = token(order.key(out[lp.perPage]))
		out = out[:lp.perPage]
	}
	return out, next, nil
}

// writeList answers a list read: the cached encoding of the whole list
// (cached, by typ, when typ is not "") for a plain request, else the
// filtered page.
func (s *Server) writeList(w http.ResponseWriter, r *http.Request, q api.Query, order listOrder, cacheAs string) {
	lp, err := parseList(r)
	if err != nil {
		writeError(w, err)
		return
	}
	res, ok := s.query(w, r, q)
	if !ok {
		return
	}
	if lp.plain() {
		if cacheAs != "" {
			writeBody(w, s.lists.body(cacheAs, res.Index, res.Plugins))
			return
		}
		writeJSON(w, http.StatusOK, nonNil(res.Plugins))
		return
	}
	// A filtered or paged answer is never cached: the cache holds whole
	// lists only, so neither is served for the other.
	out, next, err := lp.page(r.Context(), res.Plugins, order)
	if err != nil {
		writeError(w, err)
		return
	}
	if next != "" {
		w.Header().Set(headerNextToken, next)
	}
	writeJSON(w, http.StatusOK, nonNil(out))
}
