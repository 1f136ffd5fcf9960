package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/scheduler"
)

// Request body limits. A resource may be up to 1 MiB; its envelope (name,
// metadata, version, owner, JSON quoting) gets some room on top. A batch
// carries many resources, each still held to the resource service's limit.
const (
	DefaultMaxRequestBytes = 1<<20 + 64<<10
	DefaultMaxBatchBytes   = 32 << 20
)

// ClusterStatus is what the status endpoints need of the cluster: the Raft
// cluster implements it; a single in-memory server reports itself.
type ClusterStatus interface {
	// Leader returns the leader's Raft address, or "" when there is none.
	Leader() string
	// Peers returns the Raft addresses of the cluster's voters.
	Peers() ([]string, error)
	// Health says whether this server's answers can be trusted now: it
	// hears from a leader and has caught up with it (GET /v1/health).
	Health() wire.Health
}

// Config is what a Handler serves.
type Config struct {
	API      resource.API
	Registry *resource.Registry
	Cluster  ClusterStatus
	// Operator serves the operator endpoints (Raft peers, snapshots); nil
	// for an in-memory server.
	Operator Operator
	// Registerer receives the API's own metrics; Gatherer is what
	// /v1/metrics serves, so it should include everything the process
	// registers (Raft, controllers). Both nil: a private registry.
	Registerer prometheus.Registerer
	Gatherer   prometheus.Gatherer
	Logger     *slog.Logger
	// MaxRequestBytes limits a resource write's body; MaxBatchBytes a
	// batch's. Zero means the defaults above.
	MaxRequestBytes int64
	MaxBatchBytes   int64
	// EnableDebug serves Go's pprof profiles under /v1/debug/pprof/.
	EnableDebug bool
	// Scheduler serves the daemon scheduler's operations under
	// /v1/environments; nil leaves them out.
	Scheduler *scheduler.Operations
}

// Handler serves the HTTP API. It is an http.Handler.
type Handler struct {
	api      resource.API
	reg      *resource.Registry
	cluster  ClusterStatus
	op       Operator
	sched    *scheduler.Operations
	debug    bool
	gatherer prometheus.Gatherer
	log      *slog.Logger
	maxBody  int64
	maxBatch int64
	metrics  *metrics
	mux      *http.ServeMux

	// stopping ends every watch stream when the server shuts down, since
	// http.Server.Shutdown waits for handlers and a watch never ends alone.
	stopping context.Context
	stop     context.CancelFunc
}

// New builds a Handler.
func New(cfg Config) (*Handler, error) {
	if cfg.API == nil || cfg.Registry == nil || cfg.Cluster == nil {
		return nil, errors.New("httpapi: Config needs API, Registry and Cluster")
	}
	h := &Handler{
		api:      cfg.API,
		reg:      cfg.Registry,
		cluster:  cfg.Cluster,
		op:       cfg.Operator,
		sched:    cfg.Scheduler,
		debug:    cfg.EnableDebug,
		gatherer: cfg.Gatherer,
		log:      cfg.Logger,
		maxBody:  cfg.MaxRequestBytes,
		maxBatch: cfg.MaxBatchBytes,
		mux:      http.NewServeMux(),
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if h.maxBody <= 0 {
		h.maxBody = DefaultMaxRequestBytes
	}
	if h.maxBatch <= 0 {
		h.maxBatch = DefaultMaxBatchBytes
	}
	registerer := cfg.Registerer
	if g, ok := registerer.(prometheus.Gatherer); ok && h.gatherer == nil {
		h.gatherer = g
	}
	if r, ok := h.gatherer.(prometheus.Registerer); ok && registerer == nil {
		registerer = r
	}
	if registerer == nil && h.gatherer == nil {
		r := prometheus.NewRegistry()
		registerer, h.gatherer = r, r
	}
	if h.gatherer == nil {
		h.gatherer = prometheus.NewRegistry()
	}
	m, err := newMetrics(registerer)
	if err != nil {
		return nil, err
	}
	h.metrics = m
	h.stopping, h.stop = context.WithCancel(context.Background())
	h.routes()
	return h, nil
}

func (h *Handler) routes() {
	const (
		one  = "/v1/resources/{group}/{version}/{kind}/{name}"
		list = "/v1/resources/{group}/{version}/{kind}"
	)
	h.handle("GET "+one, h.read)
	h.handle("PUT "+one, h.write)
	h.handle("DELETE "+one, h.delete)
	h.handle(one, methodNotAllowed("GET, PUT, DELETE"))
	h.handle("GET "+list, h.list)
	h.handle(list, methodNotAllowed("GET"))
	h.handle("PUT /v1/batch", h.batch)
	h.handle("/v1/batch", methodNotAllowed("PUT"))
	h.handle("GET /v1/status/leader", h.leader)
	h.handle("GET /v1/status/peers", h.peers)
	h.handle("GET /v1/health", h.health)
	h.handle("GET /v1/metrics", h.serveMetrics)
	h.operatorRoutes()
	if h.sched != nil {
		h.schedulerRoutes()
	}
	if h.debug {
		h.debugRoutes()
	}
	h.handle("/", func(_ http.ResponseWriter, r *http.Request) error {
		return &routeError{status: http.StatusNotFound, code: wire.CodeNotFound,
			msg: fmt.Sprintf("no such path: %s %s (see /v1/resources/{group}/{version}/{kind}[/{name}])", r.Method, r.URL.Path)}
	})
}

// ServeHTTP serves a request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// Shutdown ends every open watch stream with a final "unavailable" error
// line, so that http.Server.Shutdown does not wait on them. Requests that
// arrive later are still served.
func (h *Handler) Shutdown() { h.stop() }

// handlerFunc is a route's handler; an error it returns becomes the JSON
// error response (unless it has already written a response).
type handlerFunc func(http.ResponseWriter, *http.Request) error

// routeError is a refusal by the router itself.
type routeError struct {
	status int
	code   string
	msg    string
	allow  string
}

func (e *routeError) Error() string { return e.msg }

func methodNotAllowed(allow string) handlerFunc {
	return func(_ http.ResponseWriter, r *http.Request) error {
		return &routeError{status: http.StatusMethodNotAllowed, code: wire.CodeMethodNotAllowed, allow: allow,
			msg: fmt.Sprintf("method %s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, allow)}
	}
}

// handle registers fn under pattern with the layers every route has: the
// token in the context, metrics, logs, and recovery from panics.
func (h *Handler) handle(pattern string, fn handlerFunc) {
	h.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &recorder{ResponseWriter: w, route: pattern}
		r = r.WithContext(resource.ContextWithToken(r.Context(), tokenFrom(r)))
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				h.log.Error("http handler panicked", "route", pattern, "panic", p, "stack", string(debug.Stack()))
				if rec.wroteHeader {
					// A response is under way; abort the connection so the
					// client sees a broken response, not a short one.
					h.metrics.observe(rec, time.Since(start))
					panic(http.ErrAbortHandler)
				}
				h.writeError(rec, r, errors.New("internal error: the server hit a bug (logged on the server)"))
			}
			h.metrics.observe(rec, time.Since(start))
			h.log.Debug("http request", "method", r.Method, "path", r.URL.Path, "route", rec.route,
				"status", rec.statusCode(), "duration", time.Since(start))
		}()
		if err := fn(rec, r); err != nil {
			if rec.wroteHeader {
				h.log.Warn("http handler failed after responding", "route", pattern, "err", err)
				return
			}
			h.writeError(rec, r, err)
		}
	})
}

func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var re *routeError
	if errors.As(err, &re) {
		if re.allow != "" {
			w.Header().Set("Allow", re.allow)
		}
		writeJSON(w, re.status, wire.Error{Error: re.msg, Code: re.code})
		return
	}
	status, body := httpError(err)
	if status >= 500 && status != http.StatusServiceUnavailable {
		h.log.Error("http request failed", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	}
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(wire.Error{Error: "encoding the response: " + err.Error(), Code: wire.CodeInternal})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// recorder remembers the status a handler wrote, for metrics and logs.
type recorder struct {
	http.ResponseWriter
	status      int
	wroteHeader bool
	route       string
}

func (r *recorder) WriteHeader(code int) {
	if !r.wroteHeader {
		r.status, r.wroteHeader = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if !r.wroteHeader {
		r.WriteHeader(http.StatusOK)
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (to flush).
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *recorder) statusCode() int {
	if !r.wroteHeader {
		return http.StatusOK
	}
	return r.status
}
