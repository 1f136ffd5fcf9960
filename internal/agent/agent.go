package agent

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
)

// Agent is one `trellis agent` process: see the package comment.
type Agent struct {
	cfg   Config
	log   *slog.Logger
	clock Clock
	state stateDir

	// ln is the local API's listener, bound by New; localAddr is how tasks
	// on this host reach it, address what Instance.address says.
	ln        net.Listener
	localAddr string
	address   string

	mu       sync.Mutex
	tasks    map[string]*task // by uid
	byName   map[string]*task // "namespace/name" → the newest task of that name
	tokens   map[string]*task // metadata token → task
	finished []*task          // forgotten tasks kept for their logs and metadata
	gone     uidSet           // uids of forgotten tasks, whose stale events are ignored
	session  string
	// registered: the Instance carries the current session.
	registered bool
	leaving    bool
	facts      facts
	defs       map[string]*pborch.TaskDefinition
	current    *session      // the live server session, nil between them
	changed    chan struct{} // closed and replaced at every change, for waiters

	// viewIndex is the index of the newest view of its tasks the agent
	// has taken in: a listing's END_OF_SNAPSHOT, an event, and the
	// versions its own reports were stored at (the task stream does not
	// echo them). No server may show it an older view, which would undo
	// what it has seen (a restarted server replaying its log lists tasks
	// long stopped, and not those placed since). Sent as
	// WatchTasksRequest.min_index; kept across sessions.
	viewIndex atomic.Uint64
	ttl       atomic.Int64 // time.Duration, from the last heartbeat
	server    atomic.Value // string: the current server's address

	reportCh chan struct{}
	runCtx   context.Context
	runners  sync.WaitGroup
	started  atomic.Bool

	leaveOnce sync.Once
	leaveDone chan struct{}
	leaveErr  error
	// left is closed once the Instance is marked left: Start returns.
	left chan struct{}
}

// finishedKept is how many stopped tasks the agent keeps in memory (and on
// disk: their directories and logs) after the store shows them stopped.
const finishedKept = 64

// New checks the configuration and binds the local API's listener (so
// that its address is known before Start).
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
		clock:     cfg.Clock,
		state:     stateDir{cfg.DataDir},
		tasks:     make(map[string]*task),
		byName:    make(map[string]*task),
		tokens:    make(map[string]*task),
		defs:      make(map[string]*pborch.TaskDefinition),
		gone:      newUIDSet(4096),
		changed:   make(chan struct{}),
		reportCh:  make(chan struct{}, 1),
		leaveDone: make(chan struct{}),
		left:      make(chan struct{}),
		session:   newSessionID(cfg.Clock.Now()),
	}
	a.ttl.Store(int64(DefaultTTL))
	a.server.Store("")
	if err := a.state.init(); err != nil {
		return nil, err
	}
	ln, err := a.listen()
	if err != nil {
		return nil, err
	}
	a.ln = ln
	a.localAddr = localAddr(ln.Addr().(*net.TCPAddr))
	a.address = cfg.AdvertiseAddr
	if a.address == "" {
		a.address = advertiseAddr(ln.Addr().(*net.TCPAddr), cfg.Servers[0])
	}
	if err := a.state.saveAgent(agentFile{HTTPAddr: a.localAddr, Name: cfg.Name}); err != nil {
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
		if prev, err := ReadAgentFile(a.cfg.DataDir); err == nil && prev != "" {
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

func newSessionID(now time.Time) string {
	return ulid.MustNew(ulid.Timestamp(now), rand.Reader).String()
}

// HTTPAddr is the local API's address on this host.
func (a *Agent) HTTPAddr() string { return a.localAddr }

// Address is the address written to Instance.address.
func (a *Agent) Address() string { return a.address }

// Session is the current session id.
func (a *Agent) Session() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.session
}

// Server is the gRPC address of the server the agent is connected to, ""
// between connections.
func (a *Agent) Server() string { return a.server.Load().(string) }

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
	a.log.Info("agent starting", "servers", a.cfg.Servers, "http", a.localAddr, "address", a.address, "session", a.Session())

	facts := probeFacts(ctx, a.cfg.Drivers)
	a.mu.Lock()
	a.facts = facts
	a.mu.Unlock()
	a.resume()
	a.removeOrphans(ctx)

	httpSrv := &http.Server{
		Handler:           a.handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelWarn),
	}
	httpDone := make(chan struct{})
	go func() {
		defer close(httpDone)
		if err := httpSrv.Serve(a.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("local API stopped", "err", err)
		}
	}()

	a.connectLoop(ctx)

	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := httpSrv.Shutdown(sctx); err != nil {
		_ = httpSrv.Close()
	}
	<-httpDone
	a.runners.Wait()
	select {
	case <-a.left:
		a.log.Info("agent left the cluster")
	default:
		a.log.Info("agent stopped; its tasks keep running")
	}
	return nil
}

// connectLoop runs server sessions one after another, moving to the next
// server whenever one ends, until ctx ends or the agent has left.
func (a *Agent) connectLoop(ctx context.Context) {
	failures := 0
	for i := 0; ; i++ {
		if ctx.Err() != nil || a.hasLeft() {
			return
		}
		addr := a.cfg.Servers[i%len(a.cfg.Servers)]
		worked, err := a.runSession(ctx, addr)
		if ctx.Err() != nil || a.hasLeft() {
			return
		}
		if worked {
			failures = 0
			a.log.Warn("lost the server; trying the next one", "server", addr, "err", err)
			continue
		}
		failures++
		wait := reconnectWait(a.cfg.BackoffMin, a.cfg.BackoffMax, a.ttlValue(), failures, randFloat())
		a.log.Warn("cannot use server", "server", addr, "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return
		case <-a.left:
			return
		case <-a.clock.After(wait):
		}
	}
}

func (a *Agent) hasLeft() bool {
	select {
	case <-a.left:
		return true
	default:
		return false
	}
}

// broadcastLocked wakes everything waiting for a change. Called with a.mu
// held.
func (a *Agent) broadcastLocked() {
	close(a.changed)
	a.changed = make(chan struct{})
}

// waitFor waits until cond (called with a.mu held) holds, or ctx ends.
func (a *Agent) waitFor(ctx context.Context, cond func() bool) error {
	for {
		a.mu.Lock()
		ok, ch := cond(), a.changed
		a.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

func (a *Agent) signalReporter() {
	select {
	case a.reportCh <- struct{}{}:
	default:
	}
}
