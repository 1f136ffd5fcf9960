package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"trellis.dev/trellis/internal/httpapi/wire"
)

// RaftPeers lists the servers of the Raft configuration.
func (c *Client) RaftPeers(ctx context.Context) ([]wire.RaftPeer, error) {
	var out []wire.RaftPeer
	err := c.do(ctx, http.MethodGet, c.pathURL("/v1/operator/raft/peers"), nil, &out)
	return out, err
}

// RemovePeer removes the server with this id or Raft address from the
// cluster and returns its id.
func (c *Client) RemovePeer(ctx context.Context, idOrAddr string) (string, error) {
	var out wire.RemovedPeer
	err := c.do(ctx, http.MethodDelete, c.pathURL("/v1/operator/raft/peers/"+url.PathEscape(idOrAddr)), nil, &out)
	return out.Removed, err
}

// SaveSnapshot writes a snapshot of the cluster's whole state to w and
// returns its size.
func (c *Client) SaveSnapshot(ctx context.Context, w io.Writer) (int64, error) {
	resp, err := c.send(ctx, http.MethodGet, c.pathURL("/v1/snapshot"), nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(w, resp.Body)
	if err == nil && resp.ContentLength >= 0 && n != resp.ContentLength {
		err = fmt.Errorf("snapshot cut short: got %d of %d bytes", n, resp.ContentLength)
	}
	return n, err
}

// RestoreSnapshot replaces the cluster's whole state with a snapshot.
func (c *Client) RestoreSnapshot(ctx context.Context, r io.Reader) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.pathURL("/v1/snapshot"), r)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	if c.token != "" {
		req.Header.Set("X-Trellis-Token", c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return c.transport(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var e wire.Error
	if json.Unmarshal(b, &e) != nil || e.Error == "" {
		e.Error = fmt.Sprintf("PUT /v1/snapshot: HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return &APIError{StatusCode: resp.StatusCode, Code: e.Code, Message: e.Error}
}
