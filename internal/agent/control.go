package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// The agent's control API (self, leave, leaves, logs) is not the tasks':
// it listens on a Unix socket in the data dir, mode 0600, so that only
// the agent's own user (root, or whoever runs it) reaches it, whatever
// tasks or other users run on the host. Tasks reach the metadata endpoint
// alone, on the TCP address of their metadata URI (metadataHandler). An
// operator who wants the control API from another machine names a TCP
// control address, which is served only with mutual TLS.

// ControlSocketName is the control socket's file name in the data dir.
const ControlSocketName = "agent.sock"

// maxSocketPath is the longest path a Unix socket can be bound at on
// Linux (sun_path holds 108 bytes with the terminating NUL).
const maxSocketPath = 107

// ControlSocket is the path of the control socket of the agent whose data
// dir is dataDir.
func ControlSocket(dataDir string) string { return filepath.Join(dataDir, ControlSocketName) }

// checkSocketPath refuses a socket path the kernel cannot bind.
func checkSocketPath(flag, path string) error {
	if len(path) > maxSocketPath {
		return configError(flag, "the control socket %s is %d bytes long, over the %d a Unix socket's path may have: choose a shorter -data-dir", path, len(path), maxSocketPath)
	}
	return nil
}

// listenControlSocket binds the control socket at path with mode 0600.
// It binds in a fresh directory of mode 0700 beside path, sets the mode
// and only then renames the socket into place, so that no other user can
// connect in the moment between bind and chmod. A socket left at path
// by an agent that died is replaced; anything else there is refused.
func listenControlSocket(path string) (*net.UnixListener, error) {
	if err := checkSocketPath("-control-socket", path); err != nil {
		return nil, err
	}
	switch fi, err := os.Lstat(path); {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, configError("-control-socket", "%v", err)
	case fi.Mode().Type() != fs.ModeSocket:
		return nil, configError("-control-socket", "%s exists and is not a socket; the agent will not replace it", path)
	default:
		// A live agent on the same data dir would answer: refuse to take
		// its socket.
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil, configError("-control-socket", "%s is the socket of an agent that is running (on the same -data-dir?)", path)
		}
	}
	private, err := os.MkdirTemp(filepath.Dir(path), ".control-")
	if err != nil {
		return nil, configError("-control-socket", "%v", err)
	}
	defer os.RemoveAll(private)
	tmp := filepath.Join(private, ControlSocketName)
	if err := checkSocketPath("-control-socket", tmp); err != nil {
		return nil, err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, configError("-control-socket", "%v", err)
	}
	// The listener is closed by the agent, which removes path itself: the
	// name it was bound at is gone by then.
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, 0o600); err != nil {
		ln.Close()
		return nil, configError("-control-socket", "%v", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		ln.Close()
		return nil, configError("-control-socket", "%v", err)
	}
	return ln, nil
}

// listenControlTCP binds the TCP control address, served with cfg (mutual
// TLS: see ControlTLS in Config).
func listenControlTCP(addr string, cfg *tls.Config) (net.Listener, error) {
	if cfg == nil {
		return nil, configError("-control-addr", "needs TLS: the control API stops tasks and reads their logs, so over TCP it is served only with -control-tls-cert-file, -control-tls-key-file and -tls-ca-file (clients present a certificate of that CA)")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, configError("-control-addr", "%v", err)
	}
	return tls.NewListener(ln, cfg), nil
}

// errControlSocket says why the CLI could not reach a control socket.
func errControlSocket(path string, err error) error {
	switch {
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("control socket %s: permission denied: it is reachable only by the user the agent runs as (%w)", path, err)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("control socket %s: no such socket: is an agent running with this -data-dir? (%w)", path, err)
	}
	return fmt.Errorf("control socket %s: %w", path, err)
}

// listenControl binds the control socket and, with ControlAddr, the TCP
// control address.
func (a *Agent) listenControl() error {
	ln, err := listenControlSocket(a.cfg.ControlSocket)
	if err != nil {
		return err
	}
	a.control, a.controlPath = ln, a.cfg.ControlSocket
	if a.cfg.ControlAddr != "" {
		if a.controlTCP, err = listenControlTCP(a.cfg.ControlAddr, a.cfg.ControlTLS); err != nil {
			a.closeControl()
			return err
		}
	}
	return nil
}

// closeControl closes the control listeners and removes the socket.
func (a *Agent) closeControl() {
	if a.control != nil {
		a.control.Close()
		_ = os.Remove(a.controlPath)
	}
	if a.controlTCP != nil {
		a.controlTCP.Close()
	}
}

// closeAlso is a listener whose Close runs also too.
type closeAlso struct {
	net.Listener
	also func()
}

func (c closeAlso) Close() error {
	err := c.Listener.Close()
	c.also()
	return err
}

// serveHTTP serves the metadata endpoint on its TCP listener and the
// control API on the control socket (and the TCP control address); stop
// shuts them down, waiting up to 5 s for requests under way.
func (a *Agent) serveHTTP() (stop func()) {
	errLog := slog.NewLogLogger(a.log.Handler(), slog.LevelWarn)
	metadata := &http.Server{Handler: a.metadataHandler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: errLog}
	control := &http.Server{Handler: a.controlHandler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: errLog}
	var wg sync.WaitGroup
	serve := func(srv *http.Server, ln net.Listener, what string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				a.log.Error(what+" stopped", "err", err)
			}
		}()
	}
	serve(metadata, a.ln, "metadata endpoint")
	serve(control, a.control, "control socket")
	if a.controlTCP != nil {
		serve(control, a.controlTCP, "control address")
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, srv := range []*http.Server{metadata, control} {
			if err := srv.Shutdown(ctx); err != nil {
				_ = srv.Close()
			}
		}
		wg.Wait()
		_ = os.Remove(a.controlPath)
	}
}
