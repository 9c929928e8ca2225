//go:build linux

package helm

import (
	"encoding/json"
	"net"
	"net/http"
)

type netDialer = net.Dialer

func jsonDecode(resp *http.Response, v any) error { return json.NewDecoder(resp.Body).Decode(v) }
