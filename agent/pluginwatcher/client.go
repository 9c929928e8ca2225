package pluginwatcher

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// maxGetInfoBytes bounds a GetInfo answer. A registration holds at most
// api.MaxPluginBytes, so a bigger answer is refused by the gRPC layer
// instead of being read into memory.
const maxGetInfoBytes = 256 << 10

// pluginConn is one connection to a registration socket, for one
// operation: the watcher dials afresh for every step, as kubelet does, so
// a plugin restarted on the same path is always reached anew.
type pluginConn struct {
	conn   *grpc.ClientConn
	client registerapi.RegistrationClient
}

func dialPlugin(socketPath string) (*pluginConn, error) {
	conn, err := grpc.NewClient("passthrough:///"+socketPath,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", addr)
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxGetInfoBytes)),
	)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", socketPath, err)
	}
	return &pluginConn{conn: conn, client: registerapi.NewRegistrationClient(conn)}, nil
}

func (c *pluginConn) Close() { _ = c.conn.Close() }

// getInfo calls GetInfo, bounded by timeout (the connection is made inside
// the call, so the bound covers the dial too).
func (c *pluginConn) getInfo(ctx context.Context, timeout time.Duration) (*registerapi.PluginInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return c.client.GetInfo(ctx, &registerapi.InfoRequest{}, grpc.WaitForReady(true))
}

// notify calls NotifyRegistrationStatus, bounded by timeout.
func (c *pluginConn) notify(ctx context.Context, timeout time.Duration, registered bool, reason string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := c.client.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{
		PluginRegistered: registered,
		Error:            reason,
	})
	return err
}

// accepts reports whether something accepts connections on the socket: a
// plugin that timed out in GetInfo but accepts is slow, one that refuses
// is gone (gRPC's wait-for-ready turns both into a deadline).
func accepts(path string, timeout time.Duration) bool {
	c, err := net.DialTimeout("unix", path, timeout)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// answered reports whether err came from a plugin that answered (with an
// error status) rather than from a socket nobody serves: only then is it
// worth telling the plugin why it is not registered.
func answered(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.Canceled, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Internal:
		return false
	}
	return true
}
