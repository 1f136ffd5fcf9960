package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"trellis.dev/trellis/internal/driver"
	"trellis.dev/trellis/internal/httpapi/wire"
)

// Clients of the local API, for the CLI (`trellis agent leave`, `trellis
// task logs`) and for tasks (the metadata endpoint).

// agentURL turns an agent address (host:port, or a URL) into a URL.
func agentURL(addr, path string) string {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	return strings.TrimRight(addr, "/") + path
}

// RequestLeave asks the agent at addr to leave the cluster and waits until
// it has.
func RequestLeave(ctx context.Context, addr string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, agentURL(addr, "/v1/agent/leave"), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return responseError(resp)
}

// OpenLogs opens a log stream of a task's container on the agent at addr;
// with follow it goes on until ctx ends or the caller closes it.
func OpenLogs(ctx context.Context, addr, namespace, name, container string, stream driver.Stream, follow bool) (io.ReadCloser, error) {
	q := url.Values{"stream": {string(stream)}}
	if follow {
		q.Set("follow", "1")
	}
	u := agentURL(addr, "/v1/tasks/"+url.PathEscape(namespace)+"/"+url.PathEscape(name)+"/logs/"+url.PathEscape(container)+"?"+q.Encode())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	if err := responseError(resp); err != nil {
		resp.Body.Close()
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
