package schedulertest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/scheduler"
	"trellis.dev/trellis/internal/scheduler/controllers"
	"trellis.dev/trellis/internal/scheduler/operations"
	"trellis.dev/trellis/internal/storage/inmem"
)

// T0 is when every harness's clock starts.
var T0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// Clock is a fake clock that moves only when told to.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Harness runs the scheduler's reconciler by hand over the real resource
// service on the in-memory backend, on a fake clock. The test plays the
// agents: it writes their reports as they would.
type Harness struct {
	T     *testing.T
	Ctx   context.Context
	API   *resource.Service
	Clock *Clock
	// Ops are the user operations; a test may swap their API.
	Ops *operations.Operations
	Ctl controller.Controller
	// Cache is the controllers' cache the controller reads, fed by Write
	// (and the controller's own writes) as the Manager's watches would.
	Cache *controller.Cache
	// Requeue is the last RequeueAfter a reconcile asked for.
	Requeue time.Duration
}

// New is a harness over a fresh store, with the core, orchestrator and
// scheduler types registered, and the controller of a first leader.
func New(t *testing.T) *Harness {
	t.Helper()
	reg := resource.NewRegistry()
	core.Register(reg)
	orchestrator.Register(reg)
	scheduler.Register(reg)
	h := &Harness{T: t, Ctx: context.Background(), Clock: &Clock{now: T0}}
	h.API = resource.NewService(resource.Config{Backend: inmem.NewBackend(), Registry: reg, Now: h.Clock.Now})
	if err := core.Bootstrap(h.Ctx, h.API); err != nil {
		t.Fatal(err)
	}
	h.Ops = &operations.Operations{API: h.API, Now: h.Clock.Now}
	h.Failover()
	return h
}

// Failover replaces the controller and its cache with new ones, the cache
// listed from the store, as a new leader would start with nothing in
// memory.
func (h *Harness) Failover() {
	h.T.Helper()
	h.Cache = controller.NewCache(controller.CheckReadOnly())
	ctl, err := controllers.Controller(controllers.Config{API: h.API, Now: h.Clock.Now, Cache: h.Cache})
	if err != nil {
		h.T.Fatal(err)
	}
	if err := h.Cache.Declare(ctl.Cached...); err != nil {
		h.T.Fatal(err)
	}
	cache := h.Cache
	h.T.Cleanup(func() {
		if err := cache.Verify(); err != nil {
			h.T.Error(err)
		}
	})
	h.Ctl = ctl
	h.relist()
}

// NewTerm starts a new term of this server's leadership: the cache is
// listed again from the store, where it may have missed changes while
// another server led, and the controller is started again.
func (h *Harness) NewTerm() {
	h.T.Helper()
	h.relist()
	if h.Ctl.OnStart != nil {
		h.Ctl.OnStart()
	}
}

// relist brings the cache in line with the store, as the Manager's
// watches do when they open: every cached resource of the store is
// written to it, and what the store no longer holds is deleted from it.
func (h *Harness) relist() {
	h.T.Helper()
	for _, ct := range h.Ctl.Cached {
		list, err := h.API.List(h.Ctx, &pbresource.ListRequest{Type: ct.Type, Tenancy: &pbresource.Tenancy{Namespace: ids.WildcardNamespace}})
		if err != nil {
			h.T.Fatal(err)
		}
		stored := map[string]bool{}
		for _, r := range list.GetResources() {
			stored[ids.String(r.GetId())] = true
			h.Feed(r)
		}
		for _, o := range h.Cache.List(ct.Type) {
			if !stored[ids.String(o.Resource.GetId())] {
				h.Cache.Apply(controller.Event{Resource: o.Resource, Deleted: true})
			}
		}
	}
}

// TaskDefinition registers task definition family:revision in namespace
// default and returns its reference.
func (h *Harness) TaskDefinition(family string, revision int64) string {
	h.T.Helper()
	td := &pborch.TaskDefinition{Family: family, Revision: revision, Containers: []*pborch.ContainerDefinition{{Name: "main", Driver: "exec", Command: []string{"sleep", "1000"}}}}
	h.Write(orchestrator.TaskDefinitionID("default", family, revision), nil, td, "")
	return orchestrator.TaskDefinitionRef(family, revision)
}

// Instance registers instance name with attrs, ready; registering it
// again keeps its status.
func (h *Harness) Instance(name string, attrs map[string]string) {
	h.T.Helper()
	in := &pborch.Instance{Cluster: "default", Status: orchestrator.InstanceReady, Attributes: attrs}
	res, err := h.API.Read(h.Ctx, &pbresource.ReadRequest{Id: orchestrator.InstanceID(name)})
	version := ""
	if err == nil {
		version = res.GetResource().GetVersion()
		old, _ := resource.DecodeData[*pborch.Instance](res.GetResource())
		in.Status = old.GetStatus()
	}
	h.Write(orchestrator.InstanceID(name), nil, in, version)
}

// CreateLoggers creates environment name of task definition family name
// at revision, on the fleet's role=logger instances, min_healthy_percent
// 75; it returns the task definition.
func (h *Harness) CreateLoggers(name string, revision int64) string {
	h.T.Helper()
	td := h.TaskDefinition(name, revision)
	if _, err := h.Ops.CreateEnvironment(h.Ctx, "default", Spec(name, td, 75, "", "role=logger")); err != nil {
		h.T.Fatal(err)
	}
	return td
}

// SetInstanceStatus sets an instance's status, as its agent or the
// orchestrator would.
func (h *Harness) SetInstanceStatus(name, st string) {
	h.T.Helper()
	res, err := h.API.Read(h.Ctx, &pbresource.ReadRequest{Id: orchestrator.InstanceID(name)})
	if err != nil {
		h.T.Fatal(err)
	}
	in, _ := resource.DecodeData[*pborch.Instance](res.GetResource())
	in.Status = st
	h.Write(orchestrator.InstanceID(name), nil, in, res.GetResource().GetVersion())
}

// Write stores m under id (a CAS on version) and feeds the change to the
// controller.
func (h *Harness) Write(id, owner *pbresource.ID, m proto.Message, version string) *pbresource.Resource {
	h.T.Helper()
	data, err := anypb.New(m)
	if err != nil {
		h.T.Fatal(err)
	}
	// As the scheduler's own code writes: the types it owns are written
	// only through it (resource.Registration.WrittenThrough).
	ctx := resource.FromOperations(h.Ctx)
	out, err := h.API.Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: id, Owner: owner, Data: data, Version: version}})
	if err != nil {
		h.T.Fatalf("write %s: %v", id.GetName(), err)
	}
	h.Feed(out.GetResource())
	return out.GetResource()
}

// Report writes what an agent reports of the stored task r (its
// status["agent"]), as a CAS on r's version, and feeds the change to the
// controller.
func (h *Harness) Report(r *pbresource.Resource, st *pborch.TaskStatus) *pbresource.Resource {
	h.T.Helper()
	payload, err := anypb.New(st)
	if err != nil {
		h.T.Fatal(err)
	}
	t, err := resource.DecodeData[*pborch.Task](r)
	if err != nil {
		h.T.Fatal(err)
	}
	// As the agent of the task's instance, which alone writes the key.
	out, err := h.API.WriteStatus(resource.AsAgent(h.Ctx, t.GetInstance()), &pbresource.WriteStatusRequest{Id: r.GetId(), Version: r.GetVersion(), Key: orchestrator.TaskStatusKey,
		Status: &pbresource.Status{ObservedGeneration: r.GetGeneration(), Data: payload}})
	if err != nil {
		h.T.Fatalf("report %s: %v", r.GetId().GetName(), err)
	}
	h.Feed(out.GetResource())
	return out.GetResource()
}

// Feed hands a change to the cache, then to the controller's mappers, as
// the Manager's watches would.
func (h *Harness) Feed(res *pbresource.Resource) {
	ev := controller.Event{Resource: res}
	h.Cache.Apply(ev)
	for _, w := range h.Ctl.Watches {
		if ids.SameType(w.Type, res.GetId().GetType()) {
			w.Map(ev, controller.CacheLookup(h.Cache))
		}
	}
}

// Reconcile runs the reconciler for env until it converges (it writes
// nothing more), at most 20 times.
func (h *Harness) Reconcile(env string) {
	h.T.Helper()
	for range 20 {
		before := h.Fingerprint()
		err := h.Ctl.Reconciler.Reconcile(h.Ctx, controller.Request{ID: scheduler.EnvironmentID("default", env)})
		var rq *controller.RequeueAfterError
		switch {
		case errors.As(err, &rq):
			h.Requeue = rq.After
		case err != nil:
			h.T.Fatalf("reconcile %s: %v", env, err)
		default:
			h.Requeue = 0
		}
		if h.Fingerprint() == before {
			return
		}
	}
	h.T.Fatalf("reconcile %s does not converge", env)
}

// Fingerprint changes whenever the store does.
func (h *Harness) Fingerprint() string {
	var s strings.Builder
	for _, typ := range []*pbresource.Type{scheduler.EnvironmentType, scheduler.DeploymentType, orchestrator.TaskType} {
		list, err := h.API.List(h.Ctx, &pbresource.ListRequest{Type: typ, Tenancy: &pbresource.Tenancy{Namespace: "default"}})
		if err != nil {
			h.T.Fatal(err)
		}
		for _, r := range list.GetResources() {
			s.WriteString(r.GetId().GetName() + "@" + r.GetVersion() + ",")
		}
	}
	return s.String()
}

// Task is a stored task: what was placed (its data), and what its agent
// reported (Status, its status["agent"]).
type Task struct {
	*pborch.Task
	Status *pborch.TaskStatus
}

// Tasks returns the stored tasks by name.
func (h *Harness) Tasks() map[string]Task {
	h.T.Helper()
	list, err := h.API.List(h.Ctx, &pbresource.ListRequest{Type: orchestrator.TaskType, Tenancy: &pbresource.Tenancy{Namespace: "default"}})
	if err != nil {
		h.T.Fatal(err)
	}
	out := map[string]Task{}
	for _, r := range list.GetResources() {
		t, _ := resource.DecodeData[*pborch.Task](r)
		out[r.GetId().GetName()] = Task{t, orchestrator.TaskStatusOf(r)}
	}
	return out
}

// Live returns, per instance, the task definition of the live task that
// is meant to run there, and fails the test if an instance has two such
// tasks, or two running.
func (h *Harness) Live() map[string]string {
	h.T.Helper()
	out := map[string]string{}
	running := map[string]string{}
	for name, t := range h.Tasks() {
		if t.Status.GetLastStatus() == orchestrator.StatusRunning {
			if prev, dup := running[t.GetInstance()]; dup {
				h.T.Fatalf("two tasks run on %s: %s and %s", t.GetInstance(), prev, name)
			}
			running[t.GetInstance()] = name
		}
		if t.Status.GetLastStatus() == orchestrator.StatusStopped || t.GetDesiredStatus() == orchestrator.StatusStopped {
			continue
		}
		if prev, dup := out[t.GetInstance()]; dup {
			h.T.Fatalf("two live tasks meant to run on %s: %s and %s (%s)", t.GetInstance(), prev, name, t.GetTaskDefinition())
		}
		out[t.GetInstance()] = t.GetTaskDefinition()
	}
	return out
}

// Agents plays the agents once: tasks asked to stop stop, then a pending
// task starts if no other task of its environment is live on its
// instance (the agent waits for the task it replaces). It returns how
// many tasks changed.
func (h *Harness) Agents(skip ...string) int {
	h.T.Helper()
	return h.play(true, skip...)
}

// StopsOnly plays the agents stopping what they are asked to stop, and
// starting nothing.
func (h *Harness) StopsOnly() {
	h.T.Helper()
	h.play(false)
}

func (h *Harness) play(starts bool, skip ...string) int {
	h.T.Helper()
	skipped := map[string]bool{}
	for _, s := range skip {
		skipped[s] = true
	}
	acted := 0
	for _, starting := range []bool{false, true} {
		if starting && !starts {
			break
		}
		list, err := h.API.List(h.Ctx, &pbresource.ListRequest{Type: orchestrator.TaskType, Tenancy: &pbresource.Tenancy{Namespace: "default"}})
		if err != nil {
			h.T.Fatal(err)
		}
		live := map[string]int{} // environment/instance
		for _, r := range list.GetResources() {
			if t, _ := resource.DecodeData[*pborch.Task](r); orchestrator.TaskStatusOf(r).GetLastStatus() != orchestrator.StatusStopped {
				live[t.GetEnvironment()+"/"+t.GetInstance()]++
			}
		}
		for _, r := range list.GetResources() {
			t, _ := resource.DecodeData[*pborch.Task](r)
			if skipped[t.GetInstance()] {
				continue
			}
			now := timestamppb.New(h.Clock.Now())
			st := proto.Clone(orchestrator.TaskStatusOf(r)).(*pborch.TaskStatus)
			switch {
			case !starting && t.GetDesiredStatus() == orchestrator.StatusStopped && st.GetLastStatus() != orchestrator.StatusStopped:
				st.LastStatus, st.StoppedAt = orchestrator.StatusStopped, now
			case starting && t.GetDesiredStatus() == orchestrator.StatusRunning && st.GetLastStatus() == orchestrator.StatusPending &&
				live[t.GetEnvironment()+"/"+t.GetInstance()] == 1:
				st.LastStatus, st.StartedAt = orchestrator.StatusRunning, now
			default:
				continue
			}
			st.ReportedAt = now
			h.Report(r, st)
			acted++
		}
	}
	return acted
}

// Kill makes the running task on instance exit with an error, as its
// agent would report it.
func (h *Harness) Kill(instance string) {
	h.T.Helper()
	list, _ := h.API.List(h.Ctx, &pbresource.ListRequest{Type: orchestrator.TaskType, Tenancy: &pbresource.Tenancy{Namespace: "default"}})
	for _, r := range list.GetResources() {
		t, _ := resource.DecodeData[*pborch.Task](r)
		if st := proto.Clone(orchestrator.TaskStatusOf(r)).(*pborch.TaskStatus); t.GetInstance() == instance && st.GetLastStatus() == orchestrator.StatusRunning {
			st.LastStatus, st.StopReason = orchestrator.StatusStopped, "essential container main exited with code 1"
			h.Report(r, st)
			return
		}
	}
	h.T.Fatalf("no running task on %s", instance)
}

// Settle alternates the scheduler and the agents until neither acts.
func (h *Harness) Settle(env string, skip ...string) {
	h.T.Helper()
	for range 50 {
		h.Reconcile(env)
		if h.Agents(skip...) == 0 {
			return
		}
	}
	h.T.Fatal("the scheduler and the agents do not settle")
}

// Env reads environment name.
func (h *Harness) Env(name string) *pbscheduler.Environment {
	h.T.Helper()
	res, err := h.API.Read(h.Ctx, &pbresource.ReadRequest{Id: scheduler.EnvironmentID("default", name)})
	if err != nil {
		h.T.Fatal(err)
	}
	e, _ := resource.DecodeData[*pbscheduler.Environment](res.GetResource())
	return e
}

// EnvStatus reads what the scheduler reports of environment name.
func (h *Harness) EnvStatus(name string) *pbscheduler.EnvironmentStatus {
	h.T.Helper()
	st, err := scheduler.EnvironmentStatusOf(h.EnvResource(name))
	if err != nil {
		h.T.Fatal(err)
	}
	return st
}

// EnvResource reads environment name's resource.
func (h *Harness) EnvResource(name string) *pbresource.Resource {
	h.T.Helper()
	res, err := h.API.Read(h.Ctx, &pbresource.ReadRequest{Id: scheduler.EnvironmentID("default", name)})
	if err != nil {
		h.T.Fatal(err)
	}
	return res.GetResource()
}

// Deployment reads deployment id of environment env.
func (h *Harness) Deployment(env, id string) *pbscheduler.Deployment {
	h.T.Helper()
	res, err := h.Ops.GetDeployment(h.Ctx, "default", env, id)
	if err != nil {
		h.T.Fatal(err)
	}
	d, _ := resource.DecodeData[*pbscheduler.Deployment](res)
	return d
}

// DeploymentsOf lists an environment's deployments, latest first.
func (h *Harness) DeploymentsOf(env string) []*pbscheduler.Deployment {
	h.T.Helper()
	list, err := h.Ops.ListDeployments(h.Ctx, "default", env)
	if err != nil {
		h.T.Fatal(err)
	}
	var out []*pbscheduler.Deployment
	for _, r := range list {
		d, _ := resource.DecodeData[*pbscheduler.Deployment](r)
		out = append(out, d)
	}
	return out
}

// Summary is the one-line summary of an environment's state.
func (h *Harness) Summary(env string) string {
	h.T.Helper()
	st, err := h.Ops.EnvironmentState(h.Ctx, "default", env)
	if err != nil {
		h.T.Fatal(err)
	}
	return st.GetSummary()
}

// RequireCode fails t unless err has code and its message contains
// contains.
func RequireCode(t *testing.T, err error, code codes.Code, contains string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("got %v, want code %v", err, code)
	}
	if msg := status.Convert(err).Message(); !strings.Contains(msg, contains) {
		t.Fatalf("message %q does not contain %q", msg, contains)
	}
}

// Fleet registers instances i1..i4; i1-i3 are loggers.
func (h *Harness) Fleet() {
	for _, n := range []string{"i1", "i2", "i3"} {
		h.Instance(n, map[string]string{"role": "logger"})
	}
	h.Instance("i4", map[string]string{"role": "web"})
}

// Spec is the spec of environment name of taskdef on the instances that
// match filters, with min_healthy_percent mhp and min_healthy_time mht.
func Spec(name, taskdef string, mhp int32, mht string, filters ...string) operations.Spec {
	return operations.Spec{Name: name, TaskDefinition: taskdef,
		InstanceGroup: &pbscheduler.InstanceGroup{Attributes: filters},
		Deployment:    &pbscheduler.DeploymentConfig{MinHealthyPercent: proto.Int32(mhp), MinHealthyTime: mht, HealthyDeadline: "1m", ProgressDeadline: "5m"}}
}

// Deploy starts a deployment of version ("" for the latest) and returns
// its id.
func (h *Harness) Deploy(env, version string) string {
	h.T.Helper()
	d, err := h.Ops.StartDeployment(h.Ctx, "default", env, version)
	if err != nil {
		h.T.Fatal(err)
	}
	return d.GetId().GetName()
}
