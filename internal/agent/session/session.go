package session

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	pbagent "trellis.dev/trellis/api/agent/v1"
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/agent/failover"
	"trellis.dev/trellis/internal/resource"
)

// Config says how to talk to the servers. The agent fills it from its
// own, checked, configuration.
type Config struct {
	// Servers are the servers' gRPC addresses, tried in turn; Failover,
	// when set, is the agent's one failover over them, shared with its
	// other links (nil: the session's own over Servers).
	Servers  []string
	Failover *failover.Servers
	// Name is the Instance's name; Cluster, Address, Version and
	// Attributes (the operator's) what its registration writes.
	Name, Cluster, Address, Version string
	Attributes                      map[string]string
	// ID is the first session id (NewID).
	ID string

	// Token is the ACL token sent with every RPC; Credentials, when set,
	// how the public gRPC port is dialled (TLS; plaintext when nil);
	// DialOptions are added to those of every connection.
	Token       string
	Credentials credentials.TransportCredentials
	DialOptions []grpc.DialOption

	// RPCTimeout bounds each unary RPC; ReportDelay is how long the
	// reporter waits after a change for more; BackoffMin and BackoffMax
	// bound the wait between connection attempts.
	RPCTimeout, ReportDelay, BackoffMin, BackoffMax time.Duration

	Logger *slog.Logger
	Clock  Clock

	// Left is closed once the instance has left the cluster: Run returns.
	Left <-chan struct{}

	// OnServer run with each server connection for as long as the agent
	// stays on that server (the task logs' link: onserver.go).
	OnServer []func(ctx context.Context, cc grpc.ClientConnInterface)
}

// Clock is the session's time source.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

// DefaultTTL is the heartbeat TTL assumed until a server says: the first
// heartbeat goes out at once anyway.
const DefaultTTL = 10 * time.Second

// Tasks is the task manager as the session sees it: where what the
// servers say about the instance's tasks goes, and where the reports come
// from. The session never looks inside a task.
type Tasks interface {
	// LearnDefinition takes a task definition the task stream carried.
	LearnDefinition(res *pbresource.Resource)
	// Observe takes a task as the store has it, or its deletion.
	Observe(res *pbresource.Resource, deleted bool)
	// ObserveListing takes a fresh listing of the instance's tasks,
	// whole; it is never given one cut short.
	ObserveListing(listing []*pbresource.Resource)
	// Resync reconciles every task again, reporting from now on as
	// session id.
	Resync(id string)
	// Attach makes a connected server the one that starts read task
	// definitions through, until detach (which waits for those starts).
	Attach(ctx context.Context, read DefinitionReader) (detach func())
	// Reports are the reports to write, in the order to write them;
	// Written says what the store took of one (nil: dropped).
	Reports() []Report
	Written(r Report, stored *pbresource.Resource)
	// ReportsWaiting receives a value when there may be reports to write.
	ReportsWaiting() <-chan struct{}
}

// DefinitionReader reads namespace ns's task definition family:revision
// ref from the servers.
type DefinitionReader func(ctx context.Context, ns, ref string) (*pborch.TaskDefinition, error)

// Report is one task's report: a status write (a CAS on the task's
// version); Seq identifies it to Tasks.Written; After, when set, is the
// uid of a report of the same batch that must be stored before this one
// is written (else this one waits for the next batch).
type Report struct {
	Request *pbresource.WriteStatusRequest
	Seq     uint64
	After   string
}

// Session is the agent's side of its servers: see the package comment.
type Session struct {
	cfg   Config
	log   *slog.Logger
	clock Clock
	tasks Tasks

	mu sync.Mutex
	id string
	// registered: the Instance carries the current session id.
	registered bool
	facts      Facts
	current    *conn         // the live connection, nil between them
	changed    chan struct{} // closed and replaced at every change, for waiters

	// viewIndex is the index of the newest view of its tasks the agent
	// has taken in: a listing's END_OF_SNAPSHOT, an event, and the
	// versions its own reports were stored at (the task stream does not
	// echo them). No server may show it an older view, which would undo
	// what it has seen (a restarted server replaying its log lists tasks
	// long stopped, and not those placed since). Sent as
	// WatchTasksRequest.min_index; kept across connections.
	viewIndex atomic.Uint64
	// held is what the agent holds of its tasks, as of viewIndex: what a
	// reconnecting agent resumes its task stream from. Kept across
	// connections.
	held   *held
	ttl    atomic.Int64 // time.Duration, from the last heartbeat
	server atomic.Value // string: the current server's address
}

// New makes the session of an agent; Run connects it.
func New(cfg Config, tasks Tasks) *Session {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Failover == nil {
		cfg.Failover = failover.New(cfg.Servers)
	}
	s := &Session{cfg: cfg, log: cfg.Logger, clock: cfg.Clock, tasks: tasks, id: cfg.ID, changed: make(chan struct{}), held: newHeld()}
	s.ttl.Store(int64(DefaultTTL))
	s.server.Store("")
	return s
}

// NewID makes a session id: each process start, and each registration
// the servers asked for, has a new one.
func NewID(now time.Time) string {
	return ulid.MustNew(ulid.Timestamp(now), rand.Reader).String()
}

// ID is the current session id.
func (s *Session) ID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id
}

// Server is the gRPC address of the server the agent is connected to, ""
// between connections.
func (s *Session) Server() string { return s.server.Load().(string) }

// ViewIndex is the index of the newest view of its tasks the agent has
// taken in.
func (s *Session) ViewIndex() uint64 { return s.viewIndex.Load() }

// Resume is what the session would resume its task stream from now: the
// tasks it holds, by uid and version, and their definitions; nil when it
// holds no whole view. For diagnostics and tests.
func (s *Session) Resume() *pbagent.WatchTasksResume { return s.held.resume() }

var errLeft = errors.New("the instance has left the cluster")

// Run connects to the servers one after another, registering the
// Instance with facts, moving to the next server whenever one ends, until
// ctx ends or the instance has left.
func (s *Session) Run(ctx context.Context, facts Facts) {
	s.mu.Lock()
	s.facts = facts
	s.mu.Unlock()
	failures := 0
	for {
		if ctx.Err() != nil || s.hasLeft() {
			return
		}
		addr := s.cfg.Failover.Current()
		worked, err := s.runConn(ctx, addr)
		if ctx.Err() != nil || s.hasLeft() {
			return
		}
		s.cfg.Failover.Leave(addr)
		var wait time.Duration
		if worked {
			failures = 0
			wait = reconnectSpread(s.ttlValue(), randFloat())
			s.log.Warn("lost the server; trying the next one", "server", addr, "err", err, "in", wait)
		} else {
			failures++
			wait = reconnectWait(s.cfg.BackoffMin, s.cfg.BackoffMax, s.ttlValue(), failures, randFloat())
			s.log.Warn("cannot use server", "server", addr, "err", err, "retry_in", wait)
		}
		select {
		case <-ctx.Done():
			return
		case <-s.cfg.Left:
			return
		case <-s.clock.After(wait):
		}
	}
}

func (s *Session) hasLeft() bool {
	select {
	case <-s.cfg.Left:
		return true
	default:
		return false
	}
}

// conn is the agent's time on one server: one gRPC connection, and the
// loops that use it (heartbeats, the watch, the reporter). It ends with
// the first of them to fail; the agent then moves to the next server.
type conn struct {
	s    *Session
	addr string
	cc   grpc.ClientConnInterface
	res  pbresource.ResourceServiceClient
	hb   pbagent.AgentServiceClient
	// beats is the open heartbeat stream (nil between streams). Only the
	// heartbeat loop uses it.
	beats *beatStream
}

// runConn connects to addr and runs the session on it. worked says it got
// as far as a registered instance and an answered heartbeat: the server
// was usable.
func (s *Session) runConn(ctx context.Context, addr string) (worked bool, err error) {
	creds := insecure.NewCredentials()
	if s.cfg.Credentials != nil {
		creds = s.cfg.Credentials
	}
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithUnaryInterceptor(tokenUnary(s.cfg.Token)),
		grpc.WithStreamInterceptor(tokenStream(s.cfg.Token)),
	}, s.cfg.DialOptions...)
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return false, err
	}
	defer cc.Close()
	c := &conn{s: s, addr: addr, cc: cc, res: pbresource.NewResourceServiceClient(cc), hb: pbagent.NewAgentServiceClient(cc)}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer c.closeBeatStream()

	s.mu.Lock()
	registered := s.registered
	s.mu.Unlock()
	if !registered {
		if err := c.register(ctx); err != nil {
			return false, err
		}
	}
	if err := c.heartbeat(ctx); err != nil {
		return false, err
	}
	s.server.Store(addr)
	s.setCurrent(c)
	// Starts made on this connection are bound to it: detach waits until
	// they have given up, so that the next connection's resync sees the
	// tasks they dropped as idle and starts them again.
	detach := s.tasks.Attach(ctx, c.readDefinition)
	defer func() {
		s.setCurrent(nil)
		s.server.Store("")
		cancel()
		detach()
	}()
	s.log.Info("connected", "server", addr, "session", s.ID())
	defer s.runOnServer(ctx, cc)()
	s.tasks.Resync(s.ID())
	return true, runAll(ctx, c.heartbeatLoop, c.watchLoop, c.reportLoop, s.untilLeft)
}

func (s *Session) setCurrent(c *conn) {
	s.mu.Lock()
	s.current = c
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

func (s *Session) untilLeft(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-s.cfg.Left:
		return errLeft
	}
}

// runAll runs fns until the first returns; it cancels the others, waits
// for them, and returns that first error.
func runAll(ctx context.Context, fns ...func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, len(fns))
	var wg sync.WaitGroup
	for _, fn := range fns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errc <- fn(ctx)
		}()
	}
	err := <-errc
	cancel()
	wg.Wait()
	return err
}

// WaitConnected waits until the session has a live connection: its
// Instance is registered and a server answered its heartbeat, so that the
// servers place tasks on it. It returns ctx's error if ctx ends first.
func (s *Session) WaitConnected(ctx context.Context) error {
	_, err := s.waitConn(ctx)
	return err
}

// withConn calls fn with the live connection, waiting for one and trying
// again (after a backoff) until fn succeeds or ctx ends.
func (s *Session) withConn(ctx context.Context, fn func(*conn) error) error {
	for failures := 1; ; failures++ {
		var c *conn
		for {
			s.mu.Lock()
			c = s.current
			ch := s.changed
			s.mu.Unlock()
			if c != nil {
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-ch:
			}
		}
		err := fn(c)
		if err == nil {
			return nil
		}
		s.log.Warn("call to the servers failed; trying again", "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.clock.After(retryDelay(s.cfg.BackoffMin, s.cfg.BackoffMax, failures, randFloat())):
		}
	}
}

func (s *Session) ttlValue() time.Duration { return time.Duration(s.ttl.Load()) }

// tokenUnary and tokenStream send the ACL token with every call.
func tokenUnary(token string) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if token != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, resource.TokenMetadataKey, token)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

func tokenStream(token string) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if token != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, resource.TokenMetadataKey, token)
		}
		return streamer(ctx, desc, cc, method, opts...)
	}
}
