package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"trellis.dev/trellis/internal/acl"

	"github.com/prometheus/client_golang/prometheus"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/httpapi"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage"
	"trellis.dev/trellis/internal/storage/inmem"
)

// probeType is a namespaced test type whose data is a message with nested
// messages, lists and maps (pbresource.Status), to exercise field paths.
var probeType = &pbresource.Type{Group: "test", GroupVersion: "v1", Kind: "Probe"}

// panicType panics in its Validate hook: a bug in a type must not take the
// server down.
var panicType = &pbresource.Type{Group: "test", GroupVersion: "v1", Kind: "Panic"}

// cluster is a ClusterStatus whose leader a test sets: the boundary the
// Raft cluster implements.
type cluster struct{ leader string }

func (c *cluster) Leader() string { return c.leader }
func (c *cluster) Health() wire.Health {
	if c.leader == "" {
		return wire.Health{Status: "unavailable", Error: "no cluster leader"}
	}
	return wire.Health{Status: "ok", Leader: c.leader}
}
func (c *cluster) Peers() ([]string, error) {
	if c.leader == "" {
		return []string{}, nil
	}
	return []string{c.leader, "127.0.0.1:9999"}, nil
}

// noLeader is the storage boundary of a Raft follower that knows no
// leader: every write and strong read fails as the Raft backend's do.
type noLeader struct {
	storage.Backend
	on bool
}

func (b *noLeader) WriteCAS(ctx context.Context, res *pbresource.Resource) (*pbresource.Resource, error) {
	if b.on {
		return nil, storage.ErrUnavailable
	}
	return b.Backend.WriteCAS(ctx, res)
}

func (b *noLeader) Read(ctx context.Context, c storage.ReadConsistency, id *pbresource.ID) (*pbresource.Resource, error) {
	if b.on && c == storage.StrongConsistency {
		return nil, storage.ErrUnavailable
	}
	return b.Backend.Read(ctx, c, id)
}

type env struct {
	t        *testing.T
	url      string
	handler  *httpapi.Handler
	backend  *noLeader
	cluster  *cluster
	registry *prometheus.Registry
	api      resource.API
}

type options struct {
	storeOpts []inmem.Option
	authorize func(ctx context.Context) (acl.Authorizer, error)
	maxBody   int64
	debug     bool
	routes    []httpapi.Route
}

func newEnv(t *testing.T, o options) *env {
	t.Helper()
	reg := resource.NewRegistry()
	core.Register(reg)
	reg.Register(resource.Registration{
		Type: probeType, Proto: &pbresource.Status{}, Scope: resource.ScopeNamespace,
		Statuses: map[string]resource.StatusPayload{"prober": {Owner: resource.StatusOwner{Controller: "prober"}, Proto: &pbresource.Condition{}}},
	})
	reg.Register(resource.Registration{
		Type: panicType, Proto: &pbresource.Status{}, Scope: resource.ScopeNamespace,
		Validate: func(*pbresource.Resource) error { panic("validate hook bug") },
	})
	backend := &noLeader{Backend: inmem.NewBackend(o.storeOpts...)}
	svc := resource.NewService(resource.Config{Backend: backend, Registry: reg, Authorize: o.authorize})
	if err := core.Bootstrap(resource.ContextWithToken(context.Background(), "ops"), svc); err != nil {
		t.Fatal(err)
	}
	promReg := prometheus.NewRegistry()
	cl := &cluster{leader: "127.0.0.1:7702"}
	h, err := httpapi.New(httpapi.Config{
		API: svc, Registry: reg, Cluster: cl,
		Registerer: promReg, Gatherer: promReg,
		MaxRequestBytes: o.maxBody,
		EnableDebug:     o.debug,
		Authorize:       o.authorize,
		Routes:          o.routes,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		h.Shutdown()
		srv.Close()
	})
	return &env{t: t, url: srv.URL, handler: h, backend: backend, cluster: cl, registry: promReg, api: svc}
}

// response is a finished HTTP exchange.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decoding %q: %v", r.body, err)
	}
}

func (r response) apiError(t *testing.T) wire.Error {
	t.Helper()
	var e wire.Error
	r.json(t, &e)
	if e.Error == "" || e.Code == "" {
		t.Fatalf("error body %q lacks error or code", r.body)
	}
	return e
}

func (e *env) do(method, path string, body string, header ...string) response {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// mustStatus fails unless r has the status, printing the body.
func mustStatus(t *testing.T, r response, status int) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
}

// stream is an open watch.
type stream struct {
	t    *testing.T
	body io.ReadCloser
	sc   *bufio.Scanner
}

func (e *env) watch(path string) *stream {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	e.t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.url+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		e.t.Fatalf("watch %s: status %d: %s", path, resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		e.t.Fatalf("watch content type %q", ct)
	}
	e.t.Cleanup(func() { resp.Body.Close() })
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 4<<20)
	return &stream{t: e.t, body: resp.Body, sc: sc}
}

// next reads one event line; it blocks until the server flushes one.
func (s *stream) next() wire.Event {
	s.t.Helper()
	if !s.sc.Scan() {
		s.t.Fatalf("watch ended: %v", s.sc.Err())
	}
	var ev wire.Event
	dec := json.NewDecoder(strings.NewReader(s.sc.Text()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ev); err != nil {
		s.t.Fatalf("event line %q: %v", s.sc.Text(), err)
	}
	return ev
}

// ended reports whether the stream is over (after its last line).
func (s *stream) ended() bool {
	if s.sc.Scan() {
		s.t.Fatalf("unexpected line after the end: %s", s.sc.Text())
	}
	return s.sc.Err() == nil || errors.Is(s.sc.Err(), io.EOF)
}
