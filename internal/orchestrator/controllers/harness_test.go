package controllers_test

import (
	"context"
	"errors"
	"google.golang.org/protobuf/types/known/timestamppb"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/orchestrator/controllers"
	"trellis.dev/trellis/internal/orchestrator/heartbeat"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage/inmem"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const testTTL = 10 * time.Second

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type leadership chan bool

func (l leadership) LeaderCh() <-chan bool { return l }

// env runs the controllers' reconcilers by hand over the real resource
// service on the in-memory backend, with a heartbeat tracker on a fake
// clock. The watches are fed by the test, as the Manager's would be: each
// write the test makes goes to the controllers' cache, then through the
// mapper.
type env struct {
	t         *testing.T
	ctx       context.Context
	api       *resource.Service
	reads     *countingReads // the controllers' API, counting their reads
	clock     *fakeClock
	lead      leadership
	tracker   *heartbeat.Tracker
	cache     *controller.Cache
	instances controller.Controller
	tasks     controller.Controller
}

func newEnv(t *testing.T) *env {
	t.Helper()
	reg := resource.NewRegistry()
	core.Register(reg)
	orchestrator.Register(reg)
	e := &env{
		t: t, ctx: context.Background(),
		api:   resource.NewService(resource.Config{Backend: inmem.NewBackend(), Registry: reg}),
		clock: &fakeClock{now: t0},
		lead:  make(leadership, 1),
	}
	if err := core.Bootstrap(e.ctx, e.api); err != nil {
		t.Fatal(err)
	}
	var err error
	e.tracker, err = heartbeat.NewTracker(heartbeat.Config{TTL: testTTL, FailoverTTL: testTTL, Instances: e.api, Leadership: e.lead, Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = e.tracker.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	e.reads = &countingReads{API: e.api}
	e.cache = controller.NewCache(controller.CheckReadOnly())
	cfg := controllers.Config{API: e.reads, Tracker: e.tracker, Cache: e.cache}
	if e.instances, err = controllers.InstanceController(cfg); err != nil {
		t.Fatal(err)
	}
	if e.tasks, err = controllers.TaskController(cfg); err != nil {
		t.Fatal(err)
	}
	for _, c := range []controller.Controller{e.instances, e.tasks} {
		if err := e.cache.Declare(c.Cached...); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if err := e.cache.Verify(); err != nil {
			t.Error(err)
		}
	})
	return e
}

// watched hands an event to the cache, then to c's mapper of its type
// (MapSelf for the managed type, unless c names another), as the
// Manager's watch does, and returns what the mapper asked for.
func (e *env) watched(c controller.Controller, ev controller.Event) []controller.Request {
	e.cache.Apply(ev)
	typ := ev.Resource.GetId().GetType()
	for _, w := range c.Watches {
		if proto.Equal(w.Type, typ) {
			return w.Map(ev, controller.CacheLookup(e.cache))
		}
	}
	if !proto.Equal(c.ManagedType, typ) {
		e.t.Fatalf("%s does not watch %s", c.Name, typ.GetKind())
	}
	return controller.MapSelf(ev, controller.CacheLookup(e.cache))
}

func (e *env) setLeader(v bool) {
	e.t.Helper()
	e.lead <- v
	deadline := time.Now().Add(10 * time.Second)
	for e.tracker.Active() != v {
		if time.Now().After(deadline) {
			e.t.Fatal("the tracker did not follow leadership")
		}
		time.Sleep(time.Millisecond)
	}
}

// register writes the Instance as AgentService.Register does, drained
// or not as the operator left it: the data, then the registration in
// status["agent"], as the instance's agent.
func (e *env) register(name, session string, drain bool) {
	e.t.Helper()
	e.writeInstance(name, func(in *pborch.Instance) {
		in.Drain, in.Status = drain, ""
		in.Attributes = map[string]string{"zone": "a"}
	})
	reg := &pborch.AgentRegistration{Session: session, RegisteredAt: timestamppb.New(e.clock.Now())}
	out, err := e.api.WriteStatus(resource.AsAgent(e.ctx, name), &pbresource.WriteStatusRequest{
		Id: orchestrator.InstanceID(name), Key: orchestrator.AgentStatusKey, Status: &pbresource.Status{Data: mustAny(e.t, reg)},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.watched(e.instances, controller.Event{Resource: out.GetResource()})
}

// writeInstance edits the stored Instance (or a new one) and writes it.
func (e *env) writeInstance(name string, edit func(*pborch.Instance)) {
	e.t.Helper()
	res := &pbresource.Resource{Id: orchestrator.InstanceID(name)}
	in := &pborch.Instance{}
	if cur, err := e.api.Read(e.ctx, &pbresource.ReadRequest{Id: res.Id}); err == nil {
		res = cur.GetResource()
		in = e.decodeInstance(res)
	}
	edit(in)
	res.Data = mustAny(e.t, in)
	out, err := e.api.Write(e.ctx, &pbresource.WriteRequest{Resource: res})
	if err != nil {
		e.t.Fatal(err)
	}
	e.watched(e.instances, controller.Event{Resource: out.GetResource()})
}

func (e *env) instance(name string) *pborch.Instance {
	e.t.Helper()
	resp, err := e.api.Read(e.ctx, &pbresource.ReadRequest{Id: orchestrator.InstanceID(name)})
	if err != nil {
		e.t.Fatal(err)
	}
	// As readers see it: the data merged with the controller's verdict.
	in, err := orchestrator.DecodeInstance(resp.GetResource())
	if err != nil {
		e.t.Fatal(err)
	}
	return in
}

func (e *env) decodeInstance(res *pbresource.Resource) *pborch.Instance {
	in, err := resource.DecodeData[*pborch.Instance](res)
	if err != nil {
		e.t.Fatal(err)
	}
	return in
}

// place writes a task, and hands it to the task controller's watch.
func (e *env) place(name, instance, lastStatus string) {
	e.t.Helper()
	id := orchestrator.TaskID("default", name)
	res := &pbresource.Resource{Id: id}
	if cur, err := e.api.Read(e.ctx, &pbresource.ReadRequest{Id: id}); err == nil {
		res = cur.GetResource()
	}
	e.watched(e.tasks, controller.Event{Resource: e.writeTask(res, instance, lastStatus)})
}

// writeTask writes res as a task placed on instance, then what its agent
// reports (lastStatus; nothing for ""), and returns it as stored.
func (e *env) writeTask(res *pbresource.Resource, instance, lastStatus string) *pbresource.Resource {
	e.t.Helper()
	res.Data = mustAny(e.t, &pborch.Task{TaskDefinition: "web:1", Instance: instance, StartedBy: "test"})
	out, err := e.api.Write(e.ctx, &pbresource.WriteRequest{Resource: res})
	if err != nil {
		e.t.Fatal(err)
	}
	if lastStatus == "" {
		return out.GetResource()
	}
	// As the agent of its instance reports it.
	st, err := e.api.WriteStatus(resource.AsAgent(e.ctx, instance), &pbresource.WriteStatusRequest{Id: out.GetResource().GetId(), Key: orchestrator.TaskStatusKey,
		Status: &pbresource.Status{Data: mustAny(e.t, &pborch.TaskStatus{LastStatus: lastStatus})}})
	if err != nil {
		e.t.Fatal(err)
	}
	return st.GetResource()
}

// task is what the store says of a task's state: its status["agent"].
func (e *env) task(name string) *pborch.TaskStatus {
	e.t.Helper()
	resp, err := e.api.Read(e.ctx, &pbresource.ReadRequest{Id: orchestrator.TaskID("default", name)})
	if err != nil {
		e.t.Fatal(err)
	}
	return orchestrator.TaskStatusOf(resp.GetResource())
}

func (e *env) reconcileInstance(name string) error {
	return e.instances.Reconciler.Reconcile(e.ctx, controller.Request{ID: orchestrator.InstanceID(name)})
}

func (e *env) reconcileTasks(name string) error {
	return e.tasks.Reconciler.Reconcile(e.ctx, controller.Request{ID: orchestrator.InstanceID(name)})
}

// requeuedAfter returns the delay of a RequeueAfter result, failing the
// test on anything else.
func (e *env) requeuedAfter(err error) time.Duration {
	e.t.Helper()
	var r *controller.RequeueAfterError
	if !errors.As(err, &r) {
		e.t.Fatalf("reconcile = %v, want a requeue", err)
	}
	return r.After
}

// countingReads is the resource service, counting the Instance reads the
// controllers make through it.
type countingReads struct {
	resource.API
	mu        sync.Mutex
	instances int
}

func (c *countingReads) Read(ctx context.Context, req *pbresource.ReadRequest) (*pbresource.ReadResponse, error) {
	if req.GetId().GetType().GetKind() == orchestrator.InstanceType.GetKind() {
		c.mu.Lock()
		c.instances++
		c.mu.Unlock()
	}
	return c.API.Read(ctx, req)
}

func (c *countingReads) instanceReads() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.instances
}

func mustAny(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func readInstance(name string) *pbresource.ReadRequest {
	return &pbresource.ReadRequest{Id: orchestrator.InstanceID(name)}
}

func deleteTask(name string) *pbresource.DeleteRequest {
	return &pbresource.DeleteRequest{Id: orchestrator.TaskID("default", name)}
}
