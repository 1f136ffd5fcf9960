package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/cluster"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/httpapi"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/informer"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage"
	"trellis.dev/trellis/internal/storage/inmem"
	"trellis.dev/trellis/internal/tlsutil"
)

// Server is one assembled Trellis server process: a storage backend, the
// resource service over it, and the gRPC and HTTP APIs over that, with the
// process's Prometheus registry and its runnables.
type Server struct {
	cfg      Config
	log      *slog.Logger
	registry *resource.Registry
	backend  storage.Backend
	cluster  httpapi.ClusterStatus
	operator httpapi.Operator // nil in memory
	raft     *cluster.Cluster // nil in memory
	api      resource.API
	metrics  *prometheus.Registry
	// grpcMetrics learns the registered methods when serving starts.
	grpcMetrics *grpcMetrics
	// authz checks every gRPC method's permission, on both ports.
	authz *methodAuthorizer

	grpc   *grpc.Server
	grpcLn net.Listener
	// serverGRPC serves the server-to-server RPCs (forwarding, cluster
	// membership, heartbeat forwarding) on serverLn; both nil in memory.
	serverGRPC *grpc.Server
	// serverGate admits the calls of serverGRPC by their caller's
	// datacenter.
	serverGate *serverPortGate
	serverLn   net.Listener
	httpAPI    *httpapi.Handler
	httpLn     net.Listener
	httpsLn    net.Listener // nil without -https-addr
	stopping   context.Context
	stop       context.CancelFunc

	leadership *leadershipHub // nil when the backend does not say
	bootstrap  *bootstrapper
	// serverID names this server among the cluster's: the Raft node id,
	// or a uuid for the run of an in-memory server.
	serverID string
	// warnings name the server's open doors (security.go), logged at
	// start and answered by /v1/health.
	warnings []string

	// extra runnables run between the gRPC server (first up, last down)
	// and the HTTP server (last up, first down).
	extra           []namedRunnable
	controllers     []controller.Controller
	controllerCache *controller.Cache // made by ControllerCache
	// informer is the indexed cache of this server's store that the
	// modules' routes read, on every server (module.Deps.Informer).
	informer *informer.Informer
	// agentSessions checks an agent's claimed session (a module's
	// AgentSessions); nil when no module registers agents.
	agentSessions func(ctx context.Context, instance, session string) (bool, error)
	started       bool
}

// New assembles a server and binds its listeners (so that port 0 resolves
// and a port in use is reported now); Start runs it.
func New(cfg Config) (_ *Server, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Server{cfg: cfg, log: cfg.Logger, metrics: prometheus.NewRegistry()}
	s.stopping, s.stop = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			s.closeListeners()
			s.closeRunnables()
		}
	}()
	s.metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mods := cfg.Modules
	if mods == nil {
		mods = DefaultModules()
	}
	if s.registry, err = registryOf(mods); err != nil {
		return nil, err
	}

	gm, err := newGRPCMetrics(s.metrics)
	if err != nil {
		return nil, err
	}
	s.grpcMetrics = gm
	// Every method's permission is checked before its handler runs, on
	// the public port and the server-to-server port alike.
	s.authz = newMethodAuthorizer(cfg.Authorize)
	authz := s.authz
	newGRPC := func(extra ...grpc.ServerOption) *grpc.Server {
		return grpc.NewServer(append([]grpc.ServerOption{
			grpc.MaxRecvMsgSize(cfg.GRPCMaxRecvBytes),
			grpc.ChainUnaryInterceptor(gm.unary(), unaryInterceptor(s.log), authz.unary(), s.agentIdentity()),
			grpc.ChainStreamInterceptor(gm.stream(), streamInterceptor(s.log, s.stopping), authz.stream(), s.agentIdentityStream()),
		}, extra...)...)
	}
	var publicTLS *tls.Config
	if cfg.TLS != nil && !cfg.PublicPlaintext {
		if publicTLS, err = cfg.TLS.IncomingPublicConfig(); err != nil {
			return nil, fmt.Errorf("-tls-cert-file: %w", err)
		}
		s.grpc = newGRPC(append([]grpc.ServerOption{grpc.Creds(credentials.NewTLS(publicTLS))}, cfg.PublicGRPCOptions...)...)
	} else {
		s.grpc = newGRPC(cfg.PublicGRPCOptions...)
	}

	// Listeners first: with port 0 the Raft node must advertise the
	// server-to-server port actually bound. They are bound in the order
	// the flags, Validate and the banner list them (HTTP, gRPC, the
	// server port), so that a second server started on the same ports
	// names the first one it could not have, the HTTP API's.
	if s.httpLn, err = listen("-http-addr", cfg.HTTPAddr); err != nil {
		return nil, err
	}
	if s.grpcLn, err = listen("-grpc-addr", cfg.GRPCAddr); err != nil {
		return nil, err
	}
	// The open doors, named with the addresses actually bound.
	exp := exposureOf(cfg)
	exp.httpAddr, exp.grpcAddr = s.httpLn.Addr().String(), s.grpcLn.Addr().String()
	s.warnings = securityWarnings(exp)
	if cfg.HTTPSAddr != "" {
		ln, err := listen("-https-addr", cfg.HTTPSAddr)
		if err != nil {
			return nil, err
		}
		s.httpsLn = tls.NewListener(ln, publicTLS)
	}

	if cfg.TLS != nil && cfg.TLS.FromFiles() {
		// The Configurator's tls.Configs read the files loaded now at
		// every handshake, so a reload needs no new listener. (Without
		// files, SIGHUP keeps its default: trellis dev ends with its
		// terminal.)
		s.Add("tls-reload", RunnableFunc(func(ctx context.Context) error {
			tlsutil.WatchSIGHUP(ctx, cfg.TLS, s.log.With("component", "tls"))
			return nil
		}))
	}
	if cfg.Raft != nil {
		// Forwarding applies any command without the resource service's
		// validation and ACL hooks, and membership changes the voters: a
		// listener of their own keeps them off the public port, so that it
		// can be closed to everything but the cluster's servers.
		opts := []grpc.ServerOption{}
		var port *tlsutil.ServerPort
		if cfg.TLS != nil {
			if port, err = cfg.TLS.ServerPort(); err != nil {
				return nil, fmt.Errorf("-tls-cert-file: %w", err)
			}
			maxAge := cfg.ServerLinkMaxAge
			if maxAge <= 0 {
				maxAge = DefaultServerLinkMaxAge
			}
			opts = append(opts, grpc.Creds(port.Credentials()), grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: maxAge}))
		}
		s.serverGate = &serverPortGate{datacenter: cfg.Datacenter, tls: cfg.TLS != nil, allDatacenters: map[string]bool{}}
		opts = append(opts, grpc.ChainUnaryInterceptor(s.serverGate.unary()), grpc.ChainStreamInterceptor(s.serverGate.stream()))
		s.serverGRPC = newGRPC(opts...)
		if s.serverLn, err = listen("-server-addr", cfg.ServerAddr); err != nil {
			return nil, err
		}
		if port != nil {
			s.serverLn = port.Listener(s.serverLn)
			if err := s.serverPortMetrics(port); err != nil {
				return nil, err
			}
		}
		if err := s.openRaft(cfg.Raft); err != nil {
			return nil, err
		}
		s.serverID = s.raft.ID()
	} else {
		s.backend = inmem.NewBackend()
		s.cluster = SingleNode{Addr: cfg.RaftAddr, Datacenter: cfg.Datacenter, Warnings: s.warnings}
		if s.serverID, err = ids.NewUUID(); err != nil {
			return nil, err
		}
	}

	svc := resource.NewService(resource.Config{
		Backend:   s.backend,
		Registry:  s.registry,
		Authorize: cfg.Authorize,
		Logger:    s.log.With("component", "resource"),
	})
	s.api = svc
	pbresource.RegisterResourceServiceServer(s.grpc, svc.GRPC())
	// Server reflection lets grpcurl and other generic clients list and
	// describe the services without the .proto files. It answers from
	// the services registered when it is asked, so the ones added below
	// are listed too (the server-to-server services are not on this
	// server). It reveals schemas only, the same ones api/ publishes.
	reflection.Register(s.grpc)
	if l, ok := s.backend.(storage.Leadership); ok {
		s.leadership = newLeadershipHub(l)
		s.bootstrap = newBootstrapper(s.api, s.leadership.Subscribe(), s.log.With("component", "bootstrap"))
	}
	if s.informer, err = s.newInformer(); err != nil {
		return nil, err
	}
	if err := s.metrics.Register(s.informer.Collector()); err != nil {
		return nil, err
	}
	routes, err := s.setupModules(mods)
	if err != nil {
		return nil, err
	}
	s.Add("informer", s.informer)

	s.httpAPI, err = httpapi.New(httpapi.Config{
		API:             s.api,
		Registry:        s.registry,
		Cluster:         s.cluster,
		Operator:        s.operator,
		Registerer:      s.metrics,
		Gatherer:        s.metrics,
		Logger:          s.log.With("component", "http"),
		MaxRequestBytes: cfg.MaxRequestBytes,
		MaxBatchBytes:   cfg.MaxBatchBytes,
		EnableDebug:     cfg.EnableDebug,
		Routes:          routes,
		Authorize:       cfg.Authorize,
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// listen binds the address of a flag; a port in use is worded with what
// most often holds it.
func listen(flag, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("%s: %s is in use (another trellis dev or server? give %s another port): %w", flag, addr, flag, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	return ln, nil
}

// closeRunnables releases what a module's runnable bound while it was set
// up (io.Closer: the DNS interface's sockets) when it never ran: New
// failed after it, or Start ended before it (it closes its own otherwise).
func (s *Server) closeRunnables() {
	for _, e := range s.extra {
		if c, ok := e.r.(io.Closer); ok {
			_ = c.Close()
		}
	}
}

func (s *Server) closeListeners() {
	for _, ln := range []net.Listener{s.grpcLn, s.serverLn, s.httpLn, s.httpsLn} {
		if ln != nil {
			_ = ln.Close()
		}
	}
}

// Add adds a runnable (the controller manager, the Raft node, ...) to run
// after the gRPC server is up and before the HTTP API opens, stopped in
// reverse. It must be called before Start.
func (s *Server) Add(name string, r Runnable) {
	if s.started {
		panic("server: Add after Start")
	}
	s.extra = append(s.extra, namedRunnable{name: name, r: r})
}

// Start runs the server until ctx ends, then shuts it down in reverse
// order within the shutdown timeout.
func (s *Server) Start(ctx context.Context) error {
	if s.started {
		return errors.New("server: already started")
	}
	s.started = true
	g := NewGroup(s.cfg.ShutdownTimeout, s.log)
	if s.leadership != nil {
		g.Add("leadership", s.leadership)
	}
	if s.serverGRPC != nil {
		s.grpcMetrics.register(s.grpc, s.serverGRPC)
		g.Add("server-grpc", RunnableFunc(func(ctx context.Context) error {
			return s.serveGRPC(ctx, "server-to-server grpc", s.serverGRPC, s.serverLn)
		}))
	} else {
		s.grpcMetrics.register(s.grpc)
	}
	g.Add("grpc", RunnableFunc(func(ctx context.Context) error {
		return s.serveGRPC(ctx, "grpc", s.grpc, s.grpcLn)
	}))
	for _, e := range s.extra {
		g.Add(e.name, e.r)
	}
	if s.leadership != nil {
		mgr, err := s.newControllerManager()
		if err != nil {
			s.closeListeners()
			s.closeRunnables()
			return err
		}
		g.Add("controllers", mgr)
	}
	if s.bootstrap != nil {
		// After the backend's runnables (Raft), before the HTTP API: people
		// and tools find "default" there from their first request.
		g.Add("bootstrap", s.bootstrap)
	}
	g.Add("http", RunnableFunc(func(ctx context.Context) error { return s.serveHTTP(ctx, "http", s.httpLn) }))
	if s.httpsLn != nil {
		g.Add("https", RunnableFunc(func(ctx context.Context) error { return s.serveHTTP(ctx, "https", s.httpsLn) }))
	}
	s.log.Info("server starting", "http", s.HTTPAddr(), "grpc", s.GRPCAddr(), "raft", s.cfg.RaftAddr,
		"server", s.ServerAddr(), "storage", s.storageKind(), "runnables", g.Names())
	for _, w := range s.warnings {
		s.log.Warn(w)
	}
	err := g.Start(ctx)
	s.closeListeners()
	s.closeRunnables()
	s.log.Info("server stopped", "err", err)
	return err
}

func (s *Server) storageKind() string {
	if s.cfg.Raft != nil {
		return "raft"
	}
	return "memory"
}

// serveGRPC serves srv on ln until ctx ends, then stops it gracefully
// within half the shutdown timeout.
func (s *Server) serveGRPC(ctx context.Context, name string, srv *grpc.Server, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("%s server: %w", name, err)
	case <-ctx.Done():
	}
	s.stop() // end watch streams, which GracefulStop would wait on
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	t := time.NewTimer(s.cfg.ShutdownTimeout / 2)
	defer t.Stop()
	select {
	case <-stopped:
	case <-t.C:
		s.log.Warn(name + ": graceful stop timed out; closing connections")
		srv.Stop()
		<-stopped
	}
	<-errc
	return nil
}

// serveHTTP serves the HTTP API on ln (a TLS listener for https) until
// ctx ends.
func (s *Server) serveHTTP(ctx context.Context, name string, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s.httpAPI,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("%s server: %w", name, err)
	case <-ctx.Done():
	}
	s.httpAPI.Shutdown() // end watch streams, which Shutdown would wait on
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout/2)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		s.log.Warn(name+": graceful shutdown timed out; closing connections", "err", err)
		_ = srv.Close()
	}
	<-errc
	return nil
}

// HTTPAddr is the address the HTTP API listens on.
func (s *Server) HTTPAddr() string { return s.httpLn.Addr().String() }

// HTTPSAddr is the address the HTTP API listens on over TLS; "" without
// -https-addr.
func (s *Server) HTTPSAddr() string {
	if s.httpsLn == nil {
		return ""
	}
	return s.httpsLn.Addr().String()
}

// GRPCAddr is the address the gRPC API listens on.
func (s *Server) GRPCAddr() string { return s.grpcLn.Addr().String() }

// ServerAddr is the address the server-to-server gRPC listener listens
// on; "" for a server in memory, which has none.
func (s *Server) ServerAddr() string {
	if s.serverLn == nil {
		return ""
	}
	return s.serverLn.Addr().String()
}

// RaftAddr is the Raft address the server reports.
func (s *Server) RaftAddr() string { return s.cfg.RaftAddr }

// InMemory reports whether the server keeps everything in memory.
func (s *Server) InMemory() bool { return s.cfg.Raft == nil }

// API is the resource service (for in-process callers: controllers).
func (s *Server) API() resource.API { return s.api }

// Registry is the type registry; register types before Start.
func (s *Server) Registry() *resource.Registry { return s.registry }

// Backend is the storage backend.
func (s *Server) Backend() storage.Backend { return s.backend }

// Leadership returns a new subscription to this server's leadership (each
// caller gets its own channel: the controller manager, the bootstrap, the
// heartbeat tracker...);
// nil when the backend does not say.
func (s *Server) Leadership() storage.Leadership {
	if s.leadership == nil {
		return nil
	}
	return s.leadership.Subscribe()
}

// Metrics is the process's Prometheus registry, served at /v1/metrics:
// register collectors on it before Start.
func (s *Server) Metrics() *prometheus.Registry { return s.metrics }

// GRPC is the gRPC server: register services on it before Start.
func (s *Server) GRPC() *grpc.Server { return s.grpc }

// ServerGRPC is the server-to-server gRPC server (forwarding, membership,
// forwarded heartbeats); nil on a server without Raft.
func (s *Server) ServerGRPC() *grpc.Server { return s.serverGRPC }
