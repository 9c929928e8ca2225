package pluginsock

import (
	"fmt"
	"math"
	"net"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
)

// socketAccess is who may use the socket, resolved from the Config before
// anything is created: the socket file's owner and group (-1: left as
// created) and the uids allowed to connect (nil: anyone who can open the
// file).
type socketAccess struct {
	uid, gid int
	allow    []uint32
}

func (c *Config) access() (socketAccess, error) {
	a := socketAccess{uid: -1, gid: -1}
	var err error
	if c.Owner != "" {
		if a.uid, err = lookupID(c.Owner, lookupUser); err != nil {
			return a, fmt.Errorf("plugin socket %s: owner %q: %w", c.Path, c.Owner, err)
		}
	}
	if c.Group != "" {
		if a.gid, err = lookupID(c.Group, lookupGroup); err != nil {
			return a, fmt.Errorf("plugin socket %s: group %q: %w", c.Path, c.Group, err)
		}
	}
	if len(c.AllowUIDs) > 0 && !peerCredSupported {
		return a, fmt.Errorf("plugin socket %s: allowed uids: %w", c.Path, errPeerCredUnsupported)
	}
	for _, u := range c.AllowUIDs {
		if u < 0 || u >= math.MaxUint32 { // 2^32-1 is (uid_t)-1, no one's
			return a, fmt.Errorf("plugin socket %s: allowed uid %d is not a uid", c.Path, u)
		}
		a.allow = append(a.allow, uint32(u))
	}
	return a, nil
}

func lookupUser(name string) (string, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return "", err
	}
	return u.Uid, nil
}

func lookupGroup(name string) (string, error) {
	g, err := user.LookupGroup(name)
	if err != nil {
		return "", err
	}
	return g.Gid, nil
}

// lookupID resolves a user or group name, or failing that a numeric id
// (one the user or group database need not know, as chown(1) takes it).
func lookupID(s string, byName func(string) (string, error)) (int, error) {
	id, nameErr := byName(s)
	if nameErr != nil {
		id = s
	}
	n, err := strconv.ParseUint(id, 10, 32)
	if err != nil || n == math.MaxUint32 {
		if nameErr != nil {
			return -1, nameErr // "unknown user x", or why the lookup failed
		}
		return -1, fmt.Errorf("id %q is not a number", id)
	}
	return int(n), nil
}

// ParseUIDs parses a comma-separated list of numeric uids, as the agent's
// -plugin-socket-allow-uid takes it.
func ParseUIDs(s string) ([]int, error) {
	var uids []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		n, err := strconv.ParseUint(f, 10, 32)
		if err != nil || n == math.MaxUint32 {
			return nil, fmt.Errorf("%q is not a uid (a number from 0 to %d)", f, uint32(math.MaxUint32-1))
		}
		uids = append(uids, int(n))
	}
	return uids, nil
}

// peerCredListener is the socket's listener when only some uids may
// connect: it hands gRPC only the connections whose peer, as the kernel
// saw it at connect() (SO_PEERCRED), has one of them, and closes the
// others before a byte is read from them. Reading the credentials does not
// block, so a refused peer cannot hold up the next one; errors of the
// listener itself (closed by Stop) are returned as they come.
type peerCredListener struct {
	net.Listener
	path    string
	allow   []uint32
	logger  hclog.Logger
	refused *atomic.Int64
}

func (l *peerCredListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		// Counted and logged before the close: the peer sees the close
		// at once, and whoever it tells must find the refusal recorded.
		refuse := func(msg string, args ...interface{}) {
			l.refused.Add(1)
			l.logger.Warn("plugin socket: refused "+msg, append([]interface{}{"path", l.path}, args...)...)
			c.Close()
		}
		uc, ok := c.(*net.UnixConn)
		if !ok { // not from a unix listener: nothing to check it by
			refuse("a connection that is not a unix socket's")
			continue
		}
		cred, err := peerCred(uc)
		if err != nil {
			refuse("a peer whose credentials could not be read", "error", err)
			continue
		}
		if !slices.Contains(l.allow, cred.uid) {
			refuse("a peer whose uid is not allowed", "uid", cred.uid, "gid", cred.gid, "pid", cred.pid)
			continue
		}
		return c, nil
	}
}
