package agent

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	"trellis.dev/trellis/internal/driver"
	"trellis.dev/trellis/internal/httpapi/wire"
)

// Clients of the agent's APIs: the control API for the CLI (`trellis
// agent leave`; operators on the instance), the metadata endpoint for
// tasks.

// Control says how to reach an agent's control API: its Unix socket, or
// a TCP control address over mutual TLS.
type Control struct {
	// Socket is the path of the control socket (ControlSocket).
	Socket string
	// Addr is a TCP control address (host:port), reached with TLS.
	Addr string
	TLS  *tls.Config
}

// String names the control API as messages do.
func (c Control) String() string {
	if c.Socket != "" {
		return c.Socket
	}
	return "https://" + c.Addr
}

// client returns an HTTP client that reaches the control API, and the
// URL base of its requests.
func (c Control) client() (*http.Client, string, error) {
	switch {
	case c.Socket != "":
		path := c.Socket
		tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			conn, err := d.DialContext(ctx, "unix", path)
			if err != nil {
				return nil, errControlSocket(path, err)
			}
			return conn, nil
		}}
		return &http.Client{Transport: tr}, "http://agent", nil
	case c.Addr != "":
		if c.TLS == nil {
			return nil, "", errors.New("a TCP control address is reached only over TLS")
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: c.TLS}}, "https://" + c.Addr, nil
	}
	return nil, "", errors.New("no control socket or address to reach the agent at")
}

func (c Control) do(ctx context.Context, method, path string) (*http.Response, error) {
	hc, base, err := c.client()
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	if err := responseError(resp); err != nil {
		resp.Body.Close()
		return nil, err
	}
	return resp, nil
}

// RequestLeave asks the agent to leave the cluster and waits until it
// has.
func RequestLeave(ctx context.Context, c Control) error {
	resp, err := c.do(ctx, http.MethodPost, "/v1/agent/leave")
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// OpenLogs opens a log stream of a task's container on the agent; with
// follow it goes on until ctx ends or the caller closes it.
func OpenLogs(ctx context.Context, c Control, namespace, name, container string, stream driver.Stream, follow bool) (io.ReadCloser, error) {
	q := url.Values{"stream": {string(stream)}}
	if follow {
		q.Set("follow", "1")
	}
	resp, err := c.do(ctx, http.MethodGet, "/v1/tasks/"+url.PathEscape(namespace)+"/"+url.PathEscape(name)+"/logs/"+url.PathEscape(container)+"?"+q.Encode())
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// ReadMetadata reads a task's metadata from its TRELLIS_TASK_METADATA_URI.
func ReadMetadata(ctx context.Context, uri string) (*TaskMetadata, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, uri, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if err := responseError(resp); err != nil {
		return nil, err
	}
	var md TaskMetadata
	if err := json.NewDecoder(resp.Body).Decode(&md); err != nil {
		return nil, fmt.Errorf("task metadata: %w", err)
	}
	return &md, nil
}

// responseError is nil for a 2xx answer, else the error the body says.
func responseError(resp *http.Response) error {
	if resp.StatusCode/100 == 2 {
		return nil
	}
	var e wire.Error
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(b, &e) == nil && e.Error != "" {
		return fmt.Errorf("agent: %s (%s)", e.Error, e.Code)
	}
	return fmt.Errorf("agent: %s: %s", resp.Status, strings.TrimSpace(string(b)))
}
