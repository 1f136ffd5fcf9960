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

	"trellis.dev/trellis/internal/acl"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/resource"
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
	// Routes are the routes of the server's modules (module.Parts.Routes),
	// served beside the API's own, each checked against the permission it
	// declares, with its request body limited to MaxRequestBytes. New
	// refuses one that declares no permission or conflicts with another.
	Routes []Route
	// Authorize resolves the caller's Authorizer from the token in the
	// context (resource.TokenFromContext), as the resource service's
	// Config.Authorize does: every route's declared permission is checked
	// against it. Nil allows everything (acl.AllowAll).
	Authorize func(ctx context.Context) (acl.Authorizer, error)
}

// Handler serves the HTTP API. It is an http.Handler.
type Handler struct {
	api      resource.API
	reg      *resource.Registry
	cluster  ClusterStatus
	op       Operator
	debug    bool
	gatherer prometheus.Gatherer
	log      *slog.Logger
	maxBody  int64
	maxBatch int64
	metrics  *metrics
	mux      *http.ServeMux
	authz    func(ctx context.Context) (acl.Authorizer, error)
	// table is every route with its permission, in registration order.
	table []Route

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
		debug:    cfg.EnableDebug,
		gatherer: cfg.Gatherer,
		log:      cfg.Logger,
		maxBody:  cfg.MaxRequestBytes,
		maxBatch: cfg.MaxBatchBytes,
		mux:      http.NewServeMux(),
		authz:    cfg.Authorize,
	}
	if h.authz == nil {
		h.authz = func(context.Context) (acl.Authorizer, error) { return acl.AllowAll{}, nil }
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
	if err := h.routes(cfg.Routes); err != nil {
		return nil, err
	}
	return h, nil
}

// routes registers the API's own routes and the modules' (extra), in the
// order Routes lists them.
func (h *Handler) routes(extra []Route) error {
	const (
		one  = "/v1/resources/{group}/{version}/{kind}/{name}"
		list = "/v1/resources/{group}/{version}/{kind}"
	)
	// The resource routes leave the decision to each resource's type
	// hooks, which the resource service calls: a batch may write cluster
	// and namespaced resources together, and a type may declare its own.
	h.handle("GET "+one, acl.PerResource, h.read)
	h.handle("PUT "+one, acl.PerResource, h.write)
	h.handle("DELETE "+one, acl.PerResource, h.delete)
	h.handle(one, acl.Public, MethodNotAllowed("GET, PUT, DELETE"))
	h.handle("GET "+list, acl.PerResource, h.list)
	h.handle(list, acl.Public, MethodNotAllowed("GET"))
	h.handle("PUT /v1/batch", acl.PerResource, h.batch)
	h.handle("/v1/batch", acl.Public, MethodNotAllowed("PUT"))
	// Clients find the leader and the servers without a token, and load
	// balancers probe health without one (Consul's /v1/status is open
	// too). Metrics describe the whole cluster: operators only.
	h.handle("GET /v1/status/leader", acl.Public, h.leader)
	h.handle("GET /v1/status/peers", acl.Public, h.peers)
	h.handle("GET /v1/health", acl.Public, h.health)
	h.handle("GET /v1/metrics", acl.OperatorRead, h.serveMetrics)
	h.operatorRoutes()
	for _, r := range extra {
		if r.Handler == nil {
			return fmt.Errorf("httpapi: route %q has no handler", r.Pattern)
		}
		if err := h.register(r.Pattern, r.Permission, h.limitBody(r.Handler)); err != nil {
			return err
		}
	}
	if h.debug {
		h.debugRoutes()
	}
	h.handle("/", acl.Public, func(_ http.ResponseWriter, r *http.Request) error {
		return &routeError{status: http.StatusNotFound, code: wire.CodeNotFound,
			msg: fmt.Sprintf("no such path: %s %s (see /v1/resources/{group}/{version}/{kind}[/{name}])", r.Method, r.URL.Path)}
	})
	return nil
}

// limitBody holds a module route's request body to the resource limit,
// which it would otherwise have to know to apply.
func (h *Handler) limitBody(fn HandlerFunc) HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		r.Body = http.MaxBytesReader(w, r.Body, h.maxBody)
		return fn(w, r)
	}
}

// Route is one route of the API and the permission it declares.
type Route struct {
	// Pattern is the net/http pattern: "GET /v1/snapshot", or a path
	// alone for a route that answers every method (405, 404).
	Pattern    string
	Permission acl.Permission
	// Handler serves the route: set on a module's routes (Config.Routes);
	// nil in the table Routes returns.
	Handler HandlerFunc
}

// Routes returns every route the handler serves, with its permission, in
// the order they were registered.
func (h *Handler) Routes() []Route { return append([]Route(nil), h.table...) }

// ServeHTTP serves a request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// Shutdown ends every open watch stream with a final "unavailable" error
// line, so that http.Server.Shutdown does not wait on them. Requests that
// arrive later are still served.
func (h *Handler) Shutdown() { h.stop() }

// HandlerFunc is a route's handler; an error it returns becomes the JSON
// error response (unless it has already written a response): see
// WriteError for how errors map to statuses.
type HandlerFunc func(http.ResponseWriter, *http.Request) error

// routeError is a refusal by the router itself.
type routeError struct {
	status int
	code   string
	msg    string
	allow  string
}

func (e *routeError) Error() string { return e.msg }

// MethodNotAllowed answers 405 naming the methods a path allows (allow:
// "GET, POST"). A module registers it, as acl.Public, on the bare path of
// its routes, as the API does on its own.
func MethodNotAllowed(allow string) HandlerFunc {
	return func(_ http.ResponseWriter, r *http.Request) error {
		return &routeError{status: http.StatusMethodNotAllowed, code: wire.CodeMethodNotAllowed, allow: allow,
			msg: fmt.Sprintf("method %s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, allow)}
	}
}

// handle registers one of the API's own routes (see register); a route
// without a declared permission is a programming error.
func (h *Handler) handle(pattern string, perm acl.Permission, fn HandlerFunc) {
	if err := h.register(pattern, perm, fn); err != nil {
		panic(err.Error())
	}
}

// register registers fn under pattern, needing perm, with the layers every
// route has: the token in the context, the permission check, metrics, logs,
// and recovery from panics. It is the only way a route is added, so
// Routes() lists them all. It refuses a route that declares no permission
// and one whose pattern conflicts with a registered one.
func (h *Handler) register(pattern string, perm acl.Permission, fn HandlerFunc) (err error) {
	if !perm.Declared() {
		return fmt.Errorf("httpapi: route %q declares no permission", pattern)
	}
	// ServeMux panics on a pattern that conflicts with another; a module's
	// route that does is refused instead, naming both.
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("httpapi: route %q: %v", pattern, p)
		}
	}()
	h.mux.HandleFunc(pattern, h.wrap(pattern, perm, fn))
	h.table = append(h.table, Route{Pattern: pattern, Permission: perm})
	return nil
}

// wrap is fn with the layers of register.
func (h *Handler) wrap(pattern string, perm acl.Permission, fn HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &recorder{ResponseWriter: w, route: pattern}
		r = r.WithContext(context.WithValue(resource.ContextWithToken(r.Context(), tokenFrom(r)), stoppingKey{}, h.stopping))
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
		err := h.authorize(r, perm)
		if err == nil {
			err = fn(rec, r)
		}
		if err != nil {
			if rec.wroteHeader {
				h.log.Warn("http handler failed after responding", "route", pattern, "err", err)
				return
			}
			h.writeError(rec, r, err)
		}
	}
}

// authorize checks the route's permission against the caller's
// Authorizer, resolved once per request. Routes that need nothing, or leave
// the decision to the resource service, resolve nothing.
func (h *Handler) authorize(r *http.Request, perm acl.Permission) error {
	if perm == acl.Public || perm == acl.PerResource {
		return nil
	}
	a, err := h.authz(r.Context())
	if err != nil {
		if errors.Is(err, acl.ErrPermissionDenied) || errors.Is(err, acl.ErrTokenRequired) {
			return err
		}
		return fmt.Errorf("resolving the caller's token: %w", err)
	}
	return acl.Check(a, perm, requestNamespace(r))
}

// requestNamespace is the namespace a request names for a namespace
// permission: its ?namespace= query, or else Consul's ?ns= (the catalog's
// Consul-compatible routes take either, and refuse both naming two), or
// "default", as the scheduler's operations read it.
func requestNamespace(r *http.Request) string {
	q := r.URL.Query()
	if ns := q.Get("namespace"); ns != "" {
		return ns
	}
	if ns := q.Get("ns"); ns != "" {
		return ns
	}
	return "default"
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
	b, err := encodeJSON(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = encodeJSON(wire.Error{Error: "encoding the response: " + err.Error(), Code: wire.CodeInternal})
	}
	writeEncodedJSON(w, status, b)
}

// encodeJSON is v's JSON answer: the object, then a newline.
func encodeJSON(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

func writeEncodedJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
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
