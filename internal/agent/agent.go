package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/credentials"

	"trellis.dev/trellis/internal/agent/component"
	"trellis.dev/trellis/internal/agent/failover"
	"trellis.dev/trellis/internal/agent/leaves"
	"trellis.dev/trellis/internal/agent/session"
	"trellis.dev/trellis/internal/agent/tasks"
	"trellis.dev/trellis/internal/informer"
)

// Agent is one `trellis agent` process: see the package comment. It
// assembles the server session and the task manager, and serves the
// local API.
type Agent struct {
	cfg Config
	log *slog.Logger

	// ln is the metadata endpoint's listener, bound by New; localAddr is
	// how tasks on this host reach it, address what Instance.address
	// says. control is the control API's Unix socket at controlPath,
	// controlTCP its TCP address with TLS (nil without ControlAddr).
	ln          net.Listener
	localAddr   string
	address     string
	control     *net.UnixListener
	controlPath string
	controlTCP  net.Listener

	tasks   *tasks.Manager
	session *session.Session
	// informer is the cache of what the components follow, over the
	// session's link (Informer).
	informer *informer.Informer
	// components are the agent's components, in order (components.go).
	components []component.Component
	// network is the bridge task networking; nil without Config.Network.
	network *taskNetwork

	// leaves is the leaf cache and leafServers its link to the servers
	// (nil with DisableLeafCache); creds is how the agent dials the
	// servers (cfg.TLS; with AutoEncrypt, mutual TLS with the agent leaf
	// once it has one: dialCredentials). Nil: plaintext.
	leaves      *leaves.Cache
	leafServers *leaves.Servers
	creds       credentials.TransportCredentials
	// servers is the agent's one failover over cfg.Servers: the session
	// and the leaf cache's link dial the server it names.
	servers *failover.Servers

	// logReads counts the reads of task logs the servers have open here.
	logReads atomic.Int64

	mu      sync.Mutex
	started atomic.Bool
	runCtx  context.Context

	leaveOnce sync.Once
	leaveDone chan struct{}
	leaveErr  error
	// left is closed once the Instance is marked left: Start returns.
	left chan struct{}
}

// New checks the configuration and binds the metadata endpoint's and the
// control API's listeners (so that their addresses are known before
// Start).
func New(cfg Config) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.NewRunner == nil {
		return nil, configError("NewRunner", "required: the agent needs a task runner")
	}
	cfg = cfg.withDefaults()
	// Task directories and log files under the data dir are handed to the
	// drivers, which run processes in other working directories and so
	// refuse relative paths: a relative -data-dir would fail every task.
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, configError("-data-dir", "%v", err)
	}
	cfg.DataDir = dataDir
	a := &Agent{
		cfg:       cfg,
		log:       cfg.Logger.With("instance", cfg.Name),
		leaveDone: make(chan struct{}),
		left:      make(chan struct{}),
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("-data-dir: %w", err)
	}
	ln, err := a.listen()
	if err != nil {
		return nil, err
	}
	a.ln = ln
	if err := a.listenControl(); err != nil {
		ln.Close()
		return nil, err
	}
	// Every refusal below closes ln; the control listeners go with it.
	ln = closeAlso{ln, a.closeControl}
	a.localAddr = localAddr(ln.Addr().(*net.TCPAddr))
	a.address = cfg.AdvertiseAddr
	if a.address == "" {
		a.address = advertiseAddr(ln.Addr().(*net.TCPAddr), cfg.Servers[0])
	}
	a.servers = failover.New(cfg.Servers)
	if cfg.TLS != nil {
		a.creds = credentials.NewTLS(cfg.TLS)
	}
	if !cfg.DisableLeafCache {
		if err := a.setupLeafCache(); err != nil {
			ln.Close()
			return nil, err
		}
	}
	var networks tasks.Networks
	if cfg.Network != nil {
		a.network, err = newTaskNetwork(cfg.Network, cfg.DataDir, a.log)
		if err != nil {
			ln.Close()
			return nil, err
		}
		a.network.metadata, a.network.addr = a.metadataHandler(), a.localAddr
		networks = a.network
	}
	// The informer and the components are made before the session they
	// use (it needs the task manager, which needs the components' hooks);
	// they reach it through agentServers once it is made.
	if a.informer, err = a.newInformer(); err != nil {
		ln.Close()
		return nil, err
	}
	hooks, err := a.makeComponents()
	if err != nil {
		ln.Close()
		return nil, err
	}
	id := session.NewID(cfg.Clock.Now())
	a.tasks, err = tasks.New(tasks.Config{
		Hooks:     hooks,
		Network:   networks,
		Instance:  cfg.Name,
		DataDir:   cfg.DataDir,
		Drivers:   cfg.Drivers,
		NewRunner: cfg.NewRunner,
		Admit:     cfg.Admit,
		LocalAddr: a.localAddr,
		Session:   id,
		Logger:    a.log,
		Clock:     cfg.Clock,
	})
	if err != nil {
		ln.Close()
		return nil, err
	}
	a.session = session.New(session.Config{
		Servers:     cfg.Servers,
		Failover:    a.servers,
		Name:        cfg.Name,
		Cluster:     cfg.Cluster,
		Address:     a.address,
		Version:     cfg.Version,
		Attributes:  cfg.Attributes,
		ID:          id,
		Token:       cfg.Token,
		Credentials: a.creds,
		DialOptions: cfg.DialOptions,
		RPCTimeout:  cfg.RPCTimeout,
		ReportDelay: cfg.ReportDelay,
		BackoffMin:  cfg.BackoffMin,
		BackoffMax:  cfg.BackoffMax,
		Logger:      a.log,
		Clock:       cfg.Clock,
		Left:        a.left,
		OnServer:    a.onServer(),
	}, taskSink{a.tasks})
	if err := tasks.WriteAgentFile(cfg.DataDir, a.localAddr, cfg.Name); err != nil {
		ln.Close()
		return nil, fmt.Errorf("-data-dir: %w", err)
	}
	return a, nil
}

// listen binds the local API. With port 0 it first tries the port the
// agent had before on this data dir, so that the metadata URIs of tasks
// it resumes still lead here.
func (a *Agent) listen() (net.Listener, error) {
	host, port, _ := net.SplitHostPort(a.cfg.HTTPAddr)
	if port == "0" {
		if prev, err := tasks.ReadAgentFile(a.cfg.DataDir); err == nil && prev != "" {
			if _, pport, err := net.SplitHostPort(prev); err == nil {
				if ln, err := net.Listen("tcp", net.JoinHostPort(host, pport)); err == nil {
					return ln, nil
				}
			}
		}
	}
	ln, err := net.Listen("tcp", a.cfg.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("-http-addr: %w", err)
	}
	return ln, nil
}

// localAddr is how a task on this host reaches the local API.
func localAddr(tcp *net.TCPAddr) string {
	if tcp.IP == nil || tcp.IP.IsUnspecified() {
		return net.JoinHostPort("127.0.0.1", fmt.Sprint(tcp.Port))
	}
	return tcp.String()
}

// advertiseAddr is the local API's address as others reach it: an
// unspecified host becomes the address this host reaches the first server
// from (a UDP "dial" sends nothing).
func advertiseAddr(tcp *net.TCPAddr, server string) string {
	if tcp.IP != nil && !tcp.IP.IsUnspecified() {
		return tcp.String()
	}
	if c, err := net.Dial("udp", server); err == nil {
		defer c.Close()
		if u, ok := c.LocalAddr().(*net.UDPAddr); ok {
			return net.JoinHostPort(u.IP.String(), fmt.Sprint(tcp.Port))
		}
	}
	return net.JoinHostPort("127.0.0.1", fmt.Sprint(tcp.Port))
}

// HTTPAddr is the metadata endpoint's address on this host.
func (a *Agent) HTTPAddr() string { return a.localAddr }

// Address is the address written to Instance.address.
func (a *Agent) Address() string { return a.address }

// ControlSocket is the path of the control API's Unix socket.
func (a *Agent) ControlSocket() string { return a.controlPath }

// ControlAddr is the TCP control address, "" without one.
func (a *Agent) ControlAddr() string {
	if a.controlTCP == nil {
		return ""
	}
	return a.controlTCP.Addr().String()
}

// Session is the current session id.
func (a *Agent) Session() string { return a.session.ID() }

// Server is the gRPC address of the server the agent is connected to, ""
// between connections.
func (a *Agent) Server() string { return a.session.Server() }

// WaitConnected waits until the agent's Instance is registered and a
// server has answered its heartbeat (the servers place tasks on it from
// then on), or ctx ends (its error).
func (a *Agent) WaitConnected(ctx context.Context) error { return a.session.WaitConnected(ctx) }

// Start runs the agent until ctx ends or it has left the cluster. Ending
// ctx leaves the tasks running (see the package comment); it returns nil
// then, and after a Leave.
func (a *Agent) Start(ctx context.Context) error {
	// runCtx is set before started: Leave reads it once it sees started
	// (the atomic store orders the two).
	a.mu.Lock()
	if a.started.Load() {
		a.mu.Unlock()
		return errors.New("agent: already started")
	}
	a.runCtx = ctx
	a.started.Store(true)
	a.mu.Unlock()
	a.log.Info("agent starting", "servers", a.cfg.Servers, "metadata", a.localAddr, "control", a.controlPath, "address", a.address, "session", a.Session())

	facts := probeFacts(ctx, a.cfg.Drivers)
	facts.BridgeNetwork = a.network != nil && a.network.Unavailable() == nil
	if a.network != nil {
		defer a.network.close()
	}
	// The components run before the tasks are resumed: a resumed task's
	// due Poststop finds them running.
	stopComponents := a.startComponents(ctx)
	a.tasks.Resume(ctx)

	stopHTTP := a.serveHTTP()

	if a.leaves != nil {
		leavesCtx, stopLeaves := context.WithCancel(ctx)
		wait := a.runLeafCache(leavesCtx)
		defer wait()
		defer stopLeaves()
	}
	if a.cfg.AutoEncrypt && a.leaves.AgentCertificate() == nil {
		a.log.Info("auto-encrypt: getting the agent's leaf from the servers before joining")
		if _, _, err := a.leaves.Get(ctx, leaves.AgentKey); err == nil {
			a.log.Info("auto-encrypt: the agent's leaf is signed; talking to the servers over mutual TLS with it")
		}
	}
	informerCtx, stopInformer := context.WithCancel(ctx)
	waitInformer := a.runInformer(informerCtx)
	if ctx.Err() == nil {
		a.session.Run(ctx, facts)
	}
	stopInformer()
	waitInformer()

	stopHTTP()
	a.tasks.Wait()
	stopComponents()
	select {
	case <-a.left:
		a.log.Info("agent left the cluster")
	default:
		a.log.Info("agent stopped; its tasks keep running")
	}
	return nil
}
