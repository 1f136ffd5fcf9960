package proxycomp

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbproxy "trellis.dev/trellis/api/proxy/v1"
)

// SocketName is the socket's name in the task's directory.
const SocketName = "proxy.sock"

// SocketPath is the socket of the task whose directory is dir.
func SocketPath(dir string) string { return filepath.Join(dir, SocketName) }

// maxSocketPath is the longest path a Unix socket can be bound at
// (sun_path, its NUL aside).
const maxSocketPath = 107

// ListenUnix listens on a Unix socket at path, however long: a path
// longer than a socket's address may be is bound through its directory's
// file descriptor (/proc/self/fd/N/name).
func ListenUnix(path string) (net.Listener, error) {
	var ln net.Listener
	err := shortPath(path, func(addr string) error {
		var err error
		ln, err = net.Listen("unix", addr)
		return err
	})
	return ln, err
}

// DialUnix connects to the Unix socket at path, however long (as
// ListenUnix binds it).
func DialUnix(ctx context.Context, path string) (net.Conn, error) {
	var c net.Conn
	err := shortPath(path, func(addr string) error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, "unix", addr)
		return err
	})
	return c, err
}

// shortPath calls fn with path, or, when path is too long for a socket's
// address, with a short name of it through its open directory.
func shortPath(path string, fn func(addr string) error) error {
	if len(path) <= maxSocketPath {
		return fn(path)
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer dir.Close()
	addr := fmt.Sprintf("/proc/self/fd/%d/%s", dir.Fd(), filepath.Base(path))
	if len(addr) > maxSocketPath {
		return fmt.Errorf("%s: the socket's name is too long", path)
	}
	return fn(addr)
}

var errNotSocket = errors.New("not a socket")

// removeSocket removes a socket left at path (by an agent that stopped);
// nothing there is not an error, and a file that is not a socket is left.
func removeSocket(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case fi.Mode().Type() != fs.ModeSocket:
		return fmt.Errorf("%s: %w", path, errNotSocket)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// listen binds the task's socket, owned by the proxy's user and group
// with mode 0660 (an agent that is not root: its own, 0600), and serves
// ProxyService on it.
func (s *served) listen() (*grpc.Server, error) {
	path := SocketPath(s.task.Dir)
	if s.task.Dir == "" {
		return nil, fmt.Errorf("task %s has no directory for its proxy's socket", s.task.ID.GetName())
	}
	if err := removeSocket(path); err != nil {
		return nil, fmt.Errorf("the proxy's socket: %w", err)
	}
	// Bound as 0777 less the umask: connecting takes write permission,
	// which only the agent's user has until the socket is handed over.
	ln, err := ListenUnix(path)
	if err != nil {
		return nil, fmt.Errorf("the proxy's socket: %w", err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	mode := os.FileMode(0o660)
	if os.Geteuid() == 0 {
		if err := os.Chown(path, ProxyUID, ProxyGID); err != nil {
			ln.Close()
			return nil, fmt.Errorf("the proxy's socket: hand it to the proxy's user %d: %w", ProxyUID, err)
		}
	} else {
		// An agent that is not root cannot run a proxy as 1337 either: the
		// socket stays its own user's, and no one else's.
		mode = 0o600
	}
	if err := os.Chmod(path, mode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("the proxy's socket: %w", err)
	}
	srv := grpc.NewServer()
	pbproxy.RegisterProxyServiceServer(srv, watchServer{s: s})
	go func() { _ = srv.Serve(ln) }()
	return srv, nil
}

// watchServer is ProxyService for one task.
type watchServer struct {
	pbproxy.UnimplementedProxyServiceServer
	s *served
}

// Watch sends the task's current snapshot, then each newer one, until
// the proxy goes or the task is stopped.
func (w watchServer) Watch(req *pbproxy.WatchRequest, stream grpc.ServerStreamingServer[pbproxy.Snapshot]) error {
	if got, want := req.GetTask(), w.s.task.ID.GetName(); got != want {
		return status.Errorf(codes.PermissionDenied, "this socket serves the proxy of task %s, not of %q", want, got)
	}
	sent := ""
	for {
		snap, next := w.s.current()
		if snap != nil && snap.GetVersion() != sent {
			if err := stream.Send(snap); err != nil {
				return err
			}
			sent = snap.GetVersion()
		}
		select {
		case <-stream.Context().Done():
			return stream.Context().Err()
		case <-w.s.ctx.Done():
			return status.Errorf(codes.Unavailable, "the agent stopped serving task %s", w.s.task.ID.GetName())
		case <-next:
		}
	}
}
