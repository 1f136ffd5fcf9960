package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"trellis.dev/trellis/internal/httpapi/wire"
)

// ErrWatchClosed is returned by Next after the server ended the stream
// without an error line (or after Close).
var ErrWatchClosed = errors.New("watch stream closed")

// Watch reads a watch stream.
type Watch struct {
	body    io.ReadCloser
	scanner *bufio.Scanner
	// Last is the index of the last event read, to resume from.
	Last uint64
}

// maxEventBytes bounds one event line: a resource is at most 1 MiB, plus
// its JSON envelope and quoting.
const maxEventBytes = 8 << 20

// Watch opens a watch: an upsert for every matching resource (or, with
// opts.Index, every change after that index), an end_of_snapshot event, then
// every change. Cancel ctx or call Close to stop it.
func (c *Client) Watch(ctx context.Context, typ wire.Type, opts ListOptions) (*Watch, error) {
	q := opts.query()
	q.Set("watch", "1")
	if opts.Index != 0 {
		q.Set("index", formatIndex(opts.Index))
	}
	resp, err := c.send(ctx, http.MethodGet, c.resourceURL(typ, "", q), nil)
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), maxEventBytes)
	return &Watch{body: resp.Body, scanner: sc, Last: opts.Index}, nil
}

// Next returns the next event. The server's final {"op":"error"} line is
// returned as an *APIError (with Code set: re-list, or watch again from
// w.Last); a stream that ends without one gives ErrWatchClosed, or the
// transport's error.
func (w *Watch) Next() (*wire.Event, error) {
	if !w.scanner.Scan() {
		if err := w.scanner.Err(); err != nil {
			return nil, err
		}
		return nil, ErrWatchClosed
	}
	raw := w.scanner.Bytes()
	var ev wire.Event
	if err := json.Unmarshal(raw, &ev); err != nil {
		return nil, fmt.Errorf("decoding watch event %q: %w", truncate(raw, 200), err)
	}
	if ev.Op == wire.OpError {
		return nil, &APIError{StatusCode: http.StatusOK, Code: ev.Code, Message: ev.Error}
	}
	if ev.Index > w.Last {
		w.Last = ev.Index
	}
	return &ev, nil
}

// NextRaw is Next that also returns the event's line exactly as the server
// sent it (for printing).
func (w *Watch) NextRaw() (*wire.Event, []byte, error) {
	ev, err := w.Next()
	if err != nil {
		return nil, nil, err
	}
	return ev, append([]byte(nil), w.scanner.Bytes()...), nil
}

// Close ends the watch.
func (w *Watch) Close() error { return w.body.Close() }

func truncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "..."
}
