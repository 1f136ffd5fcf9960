package scheduler_test

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
	"trellis.dev/trellis/internal/storage/inmem"
)

var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// harness runs the scheduler's reconciler by hand over the real resource
// service on the in-memory backend, on a fake clock. The test plays the
// agents: it writes their reports as they would.
type harness struct {
	t     *testing.T
	ctx   context.Context
	api   *resource.Service
	clock *clock
	ops   *scheduler.Operations
	ctl   controller.Controller
	// requeue is the last RequeueAfter a reconcile asked for.
	requeue time.Duration
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	reg := resource.NewRegistry()
	core.Register(reg)
	orchestrator.Register(reg)
	scheduler.Register(reg)
	h := &harness{t: t, ctx: context.Background(), clock: &clock{now: t0}}
	h.api = resource.NewService(resource.Config{Backend: inmem.NewBackend(), Registry: reg, Now: h.clock.Now})
	if err := core.Bootstrap(h.ctx, h.api); err != nil {
		t.Fatal(err)
	}
	h.ops = &scheduler.Operations{API: h.api, Now: h.clock.Now}
	h.ctl = scheduler.Controller(scheduler.Config{API: h.api, Now: h.clock.Now})
	return h
}

// failover replaces the controller with a new one, as a new leader would
// start with nothing in memory.
func (h *harness) failover() {
	h.ctl = scheduler.Controller(scheduler.Config{API: h.api, Now: h.clock.Now})
}

func (h *harness) taskdef(family string, revision int64) string {
	h.t.Helper()
	td := &pborch.TaskDefinition{Family: family, Revision: revision, Containers: []*pborch.ContainerDefinition{{Name: "main", Driver: "exec", Command: []string{"sleep", "1000"}}}}
	h.write(orchestrator.TaskDefinitionID("default", family, revision), nil, td, "")
	return orchestrator.TaskDefinitionRef(family, revision)
}

func (h *harness) instance(name string, attrs map[string]string) {
	h.t.Helper()
	in := &pborch.Instance{Cluster: "default", Status: orchestrator.InstanceReady, Attributes: attrs, Session: "s1"}
	res, err := h.api.Read(h.ctx, &pbresource.ReadRequest{Id: orchestrator.InstanceID(name)})
	version := ""
	if err == nil {
		version = res.GetResource().GetVersion()
		old, _ := resource.DecodeData[*pborch.Instance](res.GetResource())
		in.Status = old.GetStatus()
	}
	h.write(orchestrator.InstanceID(name), nil, in, version)
}

// createLoggers creates environment name of task definition family name
// at revision, on the fleet's role=logger instances, min_healthy_percent
// 75; it returns the task definition.
func (h *harness) createLoggers(name string, revision int64) string {
	h.t.Helper()
	td := h.taskdef(name, revision)
	if _, err := h.ops.CreateEnvironment(h.ctx, "default", spec(name, td, 75, "", "role=logger")); err != nil {
		h.t.Fatal(err)
	}
	return td
}

func (h *harness) setInstanceStatus(name, st string) {
	h.t.Helper()
	res, err := h.api.Read(h.ctx, &pbresource.ReadRequest{Id: orchestrator.InstanceID(name)})
	if err != nil {
		h.t.Fatal(err)
	}
	in, _ := resource.DecodeData[*pborch.Instance](res.GetResource())
	in.Status = st
	h.write(orchestrator.InstanceID(name), nil, in, res.GetResource().GetVersion())
}

func (h *harness) write(id, owner *pbresource.ID, m proto.Message, version string) *pbresource.Resource {
	h.t.Helper()
	data, err := anypb.New(m)
	if err != nil {
		h.t.Fatal(err)
	}
	out, err := h.api.Write(h.ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: id, Owner: owner, Data: data, Version: version}})
	if err != nil {
		h.t.Fatalf("write %s: %v", id.GetName(), err)
	}
	h.feed(out.GetResource())
	return out.GetResource()
}

// feed hands a change to the controller's mappers, as the Manager's
// watches would.
func (h *harness) feed(res *pbresource.Resource) {
	for _, w := range h.ctl.Watches {
		if ids.SameType(w.Type, res.GetId().GetType()) {
			w.Map(controller.Event{Resource: res}, nil)
		}
	}
}

// reconcile runs the reconciler for env until it converges (it writes
// nothing more), at most 20 times.
func (h *harness) reconcile(env string) {
	h.t.Helper()
	for range 20 {
		before := h.fingerprint()
		err := h.ctl.Reconciler.Reconcile(h.ctx, controller.Request{ID: scheduler.EnvironmentID("default", env)})
		var rq *controller.RequeueAfterError
		switch {
		case errors.As(err, &rq):
			h.requeue = rq.After
		case err != nil:
			h.t.Fatalf("reconcile %s: %v", env, err)
		default:
			h.requeue = 0
		}
		if h.fingerprint() == before {
			return
		}
	}
	h.t.Fatalf("reconcile %s does not converge", env)
}

// fingerprint changes whenever the store does.
func (h *harness) fingerprint() string {
	var s strings.Builder
	for _, typ := range []*pbresource.Type{scheduler.EnvironmentType, scheduler.DeploymentType, orchestrator.TaskType} {
		list, err := h.api.List(h.ctx, &pbresource.ListRequest{Type: typ, Tenancy: &pbresource.Tenancy{Namespace: "default"}})
		if err != nil {
			h.t.Fatal(err)
		}
		for _, r := range list.GetResources() {
			s.WriteString(r.GetId().GetName() + "@" + r.GetVersion() + ",")
		}
	}
	return s.String()
}

// tasks returns the stored tasks by name.
func (h *harness) tasks() map[string]*pborch.Task {
	h.t.Helper()
	list, err := h.api.List(h.ctx, &pbresource.ListRequest{Type: orchestrator.TaskType, Tenancy: &pbresource.Tenancy{Namespace: "default"}})
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[string]*pborch.Task{}
	for _, r := range list.GetResources() {
		t, _ := resource.DecodeData[*pborch.Task](r)
		out[r.GetId().GetName()] = t
	}
	return out
}

// live returns, by instance, the live tasks' definitions, failing the
// test if any instance has two.
// live returns, per instance, the task definition of the live task that
// is meant to run there, and fails the test if an instance has two such
// tasks, or two running.
func (h *harness) live() map[string]string {
	h.t.Helper()
	out := map[string]string{}
	running := map[string]string{}
	for name, t := range h.tasks() {
		if t.GetLastStatus() == orchestrator.StatusRunning {
			if prev, dup := running[t.GetInstance()]; dup {
				h.t.Fatalf("two tasks run on %s: %s and %s", t.GetInstance(), prev, name)
			}
			running[t.GetInstance()] = name
		}
		if t.GetLastStatus() == orchestrator.StatusStopped || t.GetDesiredStatus() == orchestrator.StatusStopped {
			continue
		}
		if prev, dup := out[t.GetInstance()]; dup {
			h.t.Fatalf("two live tasks meant to run on %s: %s and %s (%s)", t.GetInstance(), prev, name, t.GetTaskDefinition())
		}
		out[t.GetInstance()] = t.GetTaskDefinition()
	}
	return out
}

// agents plays the agents once: tasks asked to stop stop, then a pending
// task starts if no other task of its environment is live on its
// instance (the agent waits for the task it replaces). It returns how
// many tasks changed.
func (h *harness) agents(skip ...string) int {
	h.t.Helper()
	return h.play(true, skip...)
}

// stopsOnly plays the agents stopping what they are asked to stop, and
// starting nothing.
func (h *harness) stopsOnly() {
	h.t.Helper()
	h.play(false)
}

func (h *harness) play(starts bool, skip ...string) int {
	h.t.Helper()
	skipped := map[string]bool{}
	for _, s := range skip {
		skipped[s] = true
	}
	acted := 0
	for _, starting := range []bool{false, true} {
		if starting && !starts {
			break
		}
		list, err := h.api.List(h.ctx, &pbresource.ListRequest{Type: orchestrator.TaskType, Tenancy: &pbresource.Tenancy{Namespace: "default"}})
		if err != nil {
			h.t.Fatal(err)
		}
		live := map[string]int{} // environment/instance
		for _, r := range list.GetResources() {
			if t, _ := resource.DecodeData[*pborch.Task](r); t.GetLastStatus() != orchestrator.StatusStopped {
				live[t.GetEnvironment()+"/"+t.GetInstance()]++
			}
		}
		for _, r := range list.GetResources() {
			t, _ := resource.DecodeData[*pborch.Task](r)
			if skipped[t.GetInstance()] {
				continue
			}
			now := timestamppb.New(h.clock.Now())
			switch {
			case !starting && t.GetDesiredStatus() == orchestrator.StatusStopped && t.GetLastStatus() != orchestrator.StatusStopped:
				t.LastStatus, t.StoppedAt = orchestrator.StatusStopped, now
			case starting && t.GetDesiredStatus() == orchestrator.StatusRunning && t.GetLastStatus() == orchestrator.StatusPending &&
				live[t.GetEnvironment()+"/"+t.GetInstance()] == 1:
				t.LastStatus, t.StartedAt = orchestrator.StatusRunning, now
			default:
				continue
			}
			t.ReportedAt = now
			h.write(r.GetId(), r.GetOwner(), t, r.GetVersion())
			acted++
		}
	}
	return acted
}

func (h *harness) kill(instance string) {
	h.t.Helper()
	list, _ := h.api.List(h.ctx, &pbresource.ListRequest{Type: orchestrator.TaskType, Tenancy: &pbresource.Tenancy{Namespace: "default"}})
	for _, r := range list.GetResources() {
		t, _ := resource.DecodeData[*pborch.Task](r)
		if t.GetInstance() == instance && t.GetLastStatus() == orchestrator.StatusRunning {
			t.LastStatus, t.StopReason = orchestrator.StatusStopped, "essential container main exited with code 1"
			h.write(r.GetId(), r.GetOwner(), t, r.GetVersion())
			return
		}
	}
	h.t.Fatalf("no running task on %s", instance)
}

// settle alternates the scheduler and the agents until neither acts.
func (h *harness) settle(env string, skip ...string) {
	h.t.Helper()
	for range 50 {
		h.reconcile(env)
		if h.agents(skip...) == 0 {
			return
		}
	}
	h.t.Fatal("the scheduler and the agents do not settle")
}

func (h *harness) env(name string) *pbscheduler.Environment {
	h.t.Helper()
	res, err := h.api.Read(h.ctx, &pbresource.ReadRequest{Id: scheduler.EnvironmentID("default", name)})
	if err != nil {
		h.t.Fatal(err)
	}
	e, _ := resource.DecodeData[*pbscheduler.Environment](res.GetResource())
	return e
}

func (h *harness) deployment(env, id string) *pbscheduler.Deployment {
	h.t.Helper()
	res, err := h.ops.GetDeployment(h.ctx, "default", env, id)
	if err != nil {
		h.t.Fatal(err)
	}
	d, _ := resource.DecodeData[*pbscheduler.Deployment](res)
	return d
}

func (h *harness) deploymentsOf(env string) []*pbscheduler.Deployment {
	h.t.Helper()
	list, err := h.ops.ListDeployments(h.ctx, "default", env)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []*pbscheduler.Deployment
	for _, r := range list {
		d, _ := resource.DecodeData[*pbscheduler.Deployment](r)
		out = append(out, d)
	}
	return out
}

func (h *harness) summary(env string) string {
	h.t.Helper()
	st, err := h.ops.EnvironmentState(h.ctx, "default", env)
	if err != nil {
		h.t.Fatal(err)
	}
	return st.GetSummary()
}

func requireCode(t *testing.T, err error, code codes.Code, contains string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("got %v, want code %v", err, code)
	}
	if msg := status.Convert(err).Message(); !containsStr(msg, contains) {
		t.Fatalf("message %q does not contain %q", msg, contains)
	}
}

func containsStr(s, sub string) bool { return strings.Contains(s, sub) }
