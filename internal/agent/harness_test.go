package agent

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pbagent "trellis.dev/trellis/api/agent/v1"
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/client"
	"trellis.dev/trellis/internal/driver"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/server"
	"trellis.dev/trellis/internal/testlog"
	"trellis.dev/trellis/internal/tlsutil"
)

// The harness: real in-memory servers on loopback, and a task runner over
// real /bin/sh processes (runner_test.go).

const waitLimit = 30 * time.Second

// eventually waits until cond holds, failing the test after waitLimit.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s", waitLimit, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func waitTimeout() <-chan time.Time { return time.After(waitLimit) }

// testServer is a real server in memory.
type testServer struct {
	srv *server.Server
	res pbresource.ResourceServiceClient
	// agents is the AgentService, to register as an agent would.
	agents pbagent.AgentServiceClient
	stop   func()
}

func startServer(t *testing.T) *testServer { return startServerTTL(t, 0) }

// startServerTTL starts a server whose heartbeat TTL is ttl (0: the
// default).
func startServerTTL(t *testing.T, ttl time.Duration) *testServer {
	t.Helper()
	return startServerTLS(t, ttl, nil)
}

// startServerTLS starts a server whose public gRPC port serves TLS with
// tc's certificate (plaintext when tc is nil).
func startServerTLS(t *testing.T, ttl time.Duration, tc *tlsutil.Configurator) *testServer {
	t.Helper()
	mods, err := server.DefaultModulesWith("-heartbeat-ttl", ttl.String(), "-dns-addr", "")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{
		HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:7702", TLS: tc,
		Modules: mods, Logger: testlog.Logger(t), ShutdownTimeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{srv: srv}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	var once sync.Once
	ts.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("server: %v", err)
			}
		})
	}
	t.Cleanup(ts.stop)
	c, err := client.New("http://" + srv.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the server is ready", func() bool { return c.Health(ctx) == nil })
	creds := insecure.NewCredentials()
	if tc != nil {
		creds = credentials.NewTLS(tc.OutgoingClientConfig())
	}
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ts.res = pbresource.NewResourceServiceClient(conn)
	ts.agents = pbagent.NewAgentServiceClient(conn)
	return ts
}

// acceptedHeartbeats is how many heartbeats the server's heartbeat
// tracker has accepted, as its metrics count them (trellis_heartbeat_
// requests_total, result ok). Only a leader's tracker takes heartbeats:
// those of agents connected to it, and those its followers forward.
func (ts *testServer) acceptedHeartbeats(t testing.TB) float64 {
	t.Helper()
	families, err := ts.srv.Metrics().Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	for _, f := range families {
		if f.GetName() != "trellis_heartbeat_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == "ok" {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func (ts *testServer) addr() string { return ts.srv.GRPCAddr() }

// write stores a resource of msg under id.
func (ts *testServer) write(t *testing.T, id *pbresource.ID, msg proto.Message) *pbresource.Resource {
	t.Helper()
	data, err := anypb.New(msg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := ts.res.Write(context.Background(), &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: id, Data: data}})
	if err != nil {
		t.Fatalf("write %s: %v", id.GetName(), err)
	}
	return resp.GetResource()
}

func (ts *testServer) registerDefinition(t *testing.T, ns string, td *pborch.TaskDefinition) {
	t.Helper()
	ts.write(t, orchestrator.TaskDefinitionID(ns, td.GetFamily(), td.GetRevision()), td)
}

// place writes a new task of definition ref on instance.
func (ts *testServer) place(t *testing.T, ns, name, ref, instance string) *pbresource.Resource {
	t.Helper()
	return ts.write(t, orchestrator.TaskID(ns, name), &pborch.Task{TaskDefinition: ref, Instance: instance, StartedBy: "test"})
}

// storedTask is a task as the store has it: what was placed (its data)
// and what its agent reported (its status["agent"]).
type storedTask struct {
	*pborch.Task
	*pborch.TaskStatus
}

// GetStopReason is why the task stopped, as its agent reported it.
func (s *storedTask) GetStopReason() string { return s.TaskStatus.GetStopReason() }

// task reads a task; nil when there is none.
func (ts *testServer) task(t testing.TB, ns, name string) (*pbresource.Resource, *storedTask) {
	t.Helper()
	resp, err := ts.res.Read(context.Background(), &pbresource.ReadRequest{Id: orchestrator.TaskID(ns, name)})
	if status.Code(err) == codes.NotFound {
		return nil, nil
	}
	if err != nil {
		t.Fatalf("read task %s: %v", name, err)
	}
	var tk pborch.Task
	if err := resp.GetResource().GetData().UnmarshalTo(&tk); err != nil {
		t.Fatal(err)
	}
	return resp.GetResource(), &storedTask{&tk, orchestrator.TaskStatusOf(resp.GetResource())}
}

// waitTask waits until the task satisfies cond and returns it.
func (ts *testServer) waitTask(t testing.TB, ns, name, what string, cond func(*storedTask) bool) *storedTask {
	t.Helper()
	var got *storedTask
	eventually(t, name+" "+what, func() bool {
		_, got = ts.task(t, ns, name)
		return got != nil && cond(got)
	})
	return got
}

func lastStatus(s string) func(*storedTask) bool {
	return func(t *storedTask) bool { return t.GetLastStatus() == s }
}

// editTask changes a stored task with CAS, again on conflict.
func (ts *testServer) editTask(t *testing.T, ns, name string, edit func(*pborch.Task)) {
	t.Helper()
	for {
		res, tk := ts.task(t, ns, name)
		if res == nil {
			t.Fatalf("task %s is gone", name)
		}
		edit(tk.Task)
		data, _ := anypb.New(tk.Task)
		res.Data = data
		_, err := ts.res.Write(context.Background(), &pbresource.WriteRequest{Resource: res})
		if status.Code(err) == codes.Aborted {
			continue
		}
		if err != nil {
			t.Fatalf("edit task %s: %v", name, err)
		}
		return
	}
}

// markLost marks a task LOST with CAS, again on conflict, as the servers'
// task controller does when its instance is lost: its verdict
// (status["orchestrator-task"]) over the agent's latest report, written
// in process as that controller.
func (ts *testServer) markLost(t *testing.T, ns, name, reason string) {
	t.Helper()
	ctx := resource.AsController(context.Background(), orchestrator.LostStatusKey)
	for {
		res, _ := ts.task(t, ns, name)
		if res == nil {
			t.Fatalf("task %s is gone", name)
		}
		payload, _ := anypb.New(&pborch.TaskLost{Reason: reason, LostAt: timestamppb.Now(), ReportedAt: orchestrator.AgentStatusOf(res).GetReportedAt()})
		_, err := ts.srv.API().WriteStatus(ctx, &pbresource.WriteStatusRequest{Id: res.GetId(), Version: res.GetVersion(),
			Key: orchestrator.LostStatusKey, Status: &pbresource.Status{ObservedGeneration: res.GetGeneration(), Data: payload}})
		if status.Code(err) == codes.Aborted {
			continue
		}
		if err != nil {
			t.Fatalf("mark task %s lost: %v", name, err)
		}
		return
	}
}

func (ts *testServer) instance(t testing.TB, name string) (*pbresource.Resource, *pborch.Instance) {
	t.Helper()
	resp, err := ts.res.Read(context.Background(), &pbresource.ReadRequest{Id: orchestrator.InstanceID(name)})
	if status.Code(err) == codes.NotFound {
		return nil, nil
	}
	if err != nil {
		t.Fatalf("read instance %s: %v", name, err)
	}
	// As readers see it: the data with the agent's registration
	// (status["agent"]) and the servers' verdict merged in.
	in, err := orchestrator.DecodeInstance(resp.GetResource())
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetResource(), in
}

// shDefinition is a definition of one exec container running script.
func shDefinition(family string, script string) *pborch.TaskDefinition {
	return &pborch.TaskDefinition{
		Family: family, Revision: 1,
		Containers: []*pborch.ContainerDefinition{{
			Name: "app", Driver: "exec", Command: []string{"/bin/sh", "-c", script},
		}},
	}
}

// rpcs counts the agent's RPCs by method, records its task streams, and
// can hold its report writes (WriteStatuses calls).
type rpcs struct {
	mu      sync.Mutex
	counts  map[string]int
	streams []*taskStream
	// gate, when set, holds every WriteStatuses until it is closed; held
	// counts the calls waiting at it.
	gate chan struct{}
	held atomic.Int32
}

func newRPCs() *rpcs { return &rpcs{counts: make(map[string]int)} }

func (r *rpcs) count(method string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[method]
}

func (r *rpcs) hold() {
	r.mu.Lock()
	r.gate = make(chan struct{})
	r.mu.Unlock()
}

func (r *rpcs) release() {
	r.mu.Lock()
	if r.gate != nil {
		close(r.gate)
		r.gate = nil
	}
	r.mu.Unlock()
}

func (r *rpcs) dialOptions() []grpc.DialOption {
	short := func(m string) string { return m[strings.LastIndexByte(m, '/')+1:] }
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			r.mu.Lock()
			r.counts[short(method)]++
			gate := r.gate
			r.mu.Unlock()
			if gate != nil && short(method) == "WriteStatuses" {
				r.held.Add(1)
				select {
				case <-gate:
				case <-ctx.Done():
				}
				r.held.Add(-1)
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			r.mu.Lock()
			r.counts[short(method)]++
			r.mu.Unlock()
			cs, err := streamer(ctx, desc, cc, method, opts...)
			if err == nil && short(method) == "WatchList" {
				return &listStream{ClientStream: cs, r: r}, nil
			}
			if err != nil || short(method) != "WatchTasks" {
				return cs, err
			}
			ts := &taskStream{ClientStream: cs, r: r}
			r.mu.Lock()
			r.streams = append(r.streams, ts)
			r.mu.Unlock()
			return ts, nil
		}),
	}
}

// listStream counts a WatchList stream by the type it watches too, as
// "WatchList <type>": the leaf cache's roots watch rides the session's
// connection, beside the informer's watches.
type listStream struct {
	grpc.ClientStream
	r *rpcs
}

func (s *listStream) SendMsg(m any) error {
	if req, ok := m.(*pbresource.WatchListRequest); ok {
		s.r.mu.Lock()
		s.r.counts["WatchList "+ids.TypeString(req.GetType())]++
		s.r.mu.Unlock()
	}
	return s.ClientStream.SendMsg(m)
}

// taskStream records one WatchTasks stream of the agent: its request, and
// the start the server sent (up to END_OF_SNAPSHOT).
type taskStream struct {
	grpc.ClientStream
	r *rpcs
	// Under r.mu:
	req     *pbagent.WatchTasksRequest
	start   []string // "upsert NAME", "delete NAME", "def NAME"
	ended   bool
	resumed bool
}

func (s *taskStream) SendMsg(m any) error {
	if req, ok := m.(*pbagent.WatchTasksRequest); ok {
		s.r.mu.Lock()
		s.req = proto.Clone(req).(*pbagent.WatchTasksRequest)
		s.r.mu.Unlock()
	}
	return s.ClientStream.SendMsg(m)
}

func (s *taskStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	ev, ok := m.(*pbresource.WatchEvent)
	if err != nil || !ok {
		return err
	}
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	switch {
	case s.ended:
	case ev.GetOp() == pbresource.WatchEvent_OP_END_OF_SNAPSHOT:
		s.ended, s.resumed = true, ev.GetResumed()
	case ev.GetResource().GetId().GetType().GetKind() == orchestrator.TaskDefinitionType.GetKind():
		s.start = append(s.start, "def "+ev.GetResource().GetId().GetName())
	case ev.GetOp() == pbresource.WatchEvent_OP_DELETE:
		s.start = append(s.start, "delete "+ev.GetResource().GetId().GetName())
	default:
		s.start = append(s.start, "upsert "+ev.GetResource().GetId().GetName())
	}
	return nil
}

// taskStreamStart is what the agent's n-th task stream (from 0) asked
// and was sent before its END_OF_SNAPSHOT; ok once that has come.
func (r *rpcs) taskStreamStart(n int) (req *pbagent.WatchTasksRequest, start []string, resumed, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n >= len(r.streams) || !r.streams[n].ended {
		return nil, nil, false, false
	}
	s := r.streams[n]
	return s.req, append([]string(nil), s.start...), s.resumed, true
}

// taskStreams is how many task streams the agent opened.
func (r *rpcs) taskStreams() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.streams)
}

// metric is the value of the server's counter name with label
// label=value ("" for a counter without labels).
func (ts *testServer) metric(t testing.TB, name, label, value string) float64 {
	t.Helper()
	families, err := ts.srv.Metrics().Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if label == "" || l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
			if label == "" {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// testDriver stands for a driver in fingerprints only: the runner under
// test (runner_test.go) runs processes itself.
type testDriver struct{ name string }

var errTestDriver = errors.New("the test driver only fingerprints")

func (d testDriver) Name() string { return d.name }
func (d testDriver) Fingerprint(context.Context) driver.Fingerprint {
	return driver.Fingerprint{Available: true, Detail: "test 1.0"}
}
func (testDriver) Start(context.Context, driver.Spec) (driver.Handle, error) {
	return driver.Handle{}, errTestDriver
}
func (testDriver) Wait(context.Context, driver.Handle) (driver.Exit, error) {
	return driver.Exit{}, errTestDriver
}
func (testDriver) Signal(context.Context, driver.Handle, syscall.Signal) error { return errTestDriver }
func (testDriver) Exec(context.Context, driver.Handle, []string) (int, []byte, error) {
	return 0, nil, errTestDriver
}
func (testDriver) Recover(context.Context, driver.Handle) error { return errTestDriver }
func (testDriver) Destroy(context.Context, driver.Handle) error { return errTestDriver }
func (testDriver) Logs(context.Context, driver.Handle, driver.Spec, driver.Stream, bool) (io.ReadCloser, error) {
	return nil, errTestDriver
}

// running is an agent started by a test.
type running struct {
	*Agent
	cancel context.CancelFunc
	done   chan error
}

// startAgent runs an agent until the test ends (or kill).
func startAgent(t *testing.T, cfg Config) *running {
	t.Helper()
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Agent: a, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Start(ctx) }()
	t.Cleanup(func() { r.kill(t) })
	return r
}

// kill ends the agent as SIGKILL would, as far as its tasks can tell: it
// stops without stopping them. It waits for Start to return.
func (r *running) kill(t testing.TB) {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok && err != nil {
			t.Errorf("agent Start = %v", err)
		}
		if ok {
			close(r.done)
		}
	case <-time.After(waitLimit):
		t.Fatal("the agent did not stop")
	}
}

// config is an agent configuration for the test, on servers.
func config(t *testing.T, name string, runners *procTable, servers ...*testServer) Config {
	var addrs []string
	for _, s := range servers {
		addrs = append(addrs, s.addr())
	}
	return Config{
		Servers:    addrs,
		DataDir:    t.TempDir(),
		Name:       name,
		Drivers:    map[string]driver.Driver{"exec": testDriver{"exec"}},
		NewRunner:  runners.newRunner,
		Logger:     testlog.Logger(t),
		BackoffMin: 10 * time.Millisecond,
		BackoffMax: 200 * time.Millisecond,
	}
}

func httpGet(t testing.TB, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func readFileEventually(t testing.TB, path string) string {
	t.Helper()
	var b []byte
	eventually(t, path+" is written", func() bool {
		var err error
		b, err = os.ReadFile(path)
		return err == nil && strings.HasSuffix(string(b), "\n")
	})
	return strings.TrimSpace(string(b))
}
