package controllers_test

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/scheduler"
	"trellis.dev/trellis/internal/scheduler/schedulertest"
)

// bridgeTaskDefinition registers family:revision in namespace ns, a
// bridge task publishing container port 80 on host port hostPort.
func bridgeTaskDefinition(h *schedulertest.Harness, ns, family string, revision int64, hostPort uint32) string {
	h.T.Helper()
	td := &pborch.TaskDefinition{Family: family, Revision: revision, Network: orchestrator.NetworkBridge,
		Containers: []*pborch.ContainerDefinition{{Name: "main", Driver: "exec", Command: []string{"sleep", "1000"}}},
		Ports:      []*pborch.PortMapping{{Name: "http", ContainerPort: 80, HostPort: hostPort}}}
	h.Write(orchestrator.TaskDefinitionID(ns, family, revision), nil, td, "")
	return orchestrator.TaskDefinitionRef(family, revision)
}

// runByHand places a task of taskdef on instance as `trellis task run`
// does, and reports it RUNNING as its agent would.
func runByHand(h *schedulertest.Harness, ns, name, taskdef, instance string) *pbresource.Resource {
	h.T.Helper()
	res := h.Write(orchestrator.TaskID(ns, name), nil, &pborch.Task{TaskDefinition: taskdef, Instance: instance, StartedBy: "trellis task run",
		DesiredStatus: orchestrator.StatusRunning, CreatedAt: timestamppb.New(h.Clock.Now())}, "")
	return h.Report(res, &pborch.TaskStatus{LastStatus: orchestrator.StatusRunning, StartedAt: timestamppb.New(h.Clock.Now()), ReportedAt: timestamppb.New(h.Clock.Now())})
}

// mapped is what the controller's mappers ask for on a change of res.
func mapped(h *schedulertest.Harness, res *pbresource.Resource) []string {
	var out []string
	for _, w := range h.Ctl.Watches {
		if ids.SameType(w.Type, res.GetId().GetType()) {
			for _, req := range w.Map(controller.Event{Resource: res}, controller.CacheLookup(h.Cache)) {
				out = append(out, req.ID.GetName())
			}
		}
	}
	return out
}

// TestBridgeAndHostPortPlacement runs the scheduler over the real store
// with a bridge task definition that publishes host port 8080: it is
// placed only where network.bridge is "true" and 8080/tcp is free (a task
// run by hand holds it on i2); the deployment, the status and the diff
// say why the others were not chosen; freeing the port places the task
// at once; a rolling update of the same port replaces each task in place;
// and a second environment wanting 8080 is blocked by the first's tasks.
func TestBridgeAndHostPortPlacement(t *testing.T) {
	h := schedulertest.New(t)
	for _, n := range []string{"i1", "i2"} {
		h.Instance(n, map[string]string{"role": "logger", orchestrator.AttrNetworkBridge: "true"})
	}
	h.Instance("i3", map[string]string{"role": "logger", orchestrator.AttrNetworkBridge: "false"})
	h.Instance("i4", map[string]string{"role": "logger"})
	byHand := runByHand(h, "default", "01jhand", bridgeTaskDefinition(h, "default", "other", 1, 8080), "i2")

	td := bridgeTaskDefinition(h, "default", "web", 1, 8080)
	if _, err := h.Ops.CreateEnvironment(h.Ctx, "default", schedulertest.Spec("web", td, 0, "", "role=logger")); err != nil {
		t.Fatal(err)
	}
	diff, err := h.Ops.Diff(h.Ctx, "default", "web", "")
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, c := range diff.GetChanges() {
		actions = append(actions, c.GetInstance()+" "+c.GetAction()+" "+c.GetReason())
	}
	wantDiff := []string{
		"i1 place ",
		"i2 blocked host port 8080/tcp is taken by task 01jhand",
		"i3 blocked the task definition's network is bridge, and the instance cannot run bridge tasks (network.bridge=false)",
		"i4 blocked the task definition's network is bridge, and the instance does not say it runs bridge tasks (no network.bridge attribute)",
	}
	if !slices.Equal(actions, wantDiff) || diff.GetPlace() != 1 || diff.GetBlocked() != 3 {
		t.Fatalf("diff:\n%s\nwant:\n%s", strings.Join(actions, "\n"), strings.Join(wantDiff, "\n"))
	}

	id := h.Deploy("web", "")
	h.Settle("web")
	live := h.Live()
	if live["i1"] != td || live["i2"] != "other:1" || live["i3"] != "" || live["i4"] != "" {
		t.Fatalf("live %v: want web:1 on i1 alone beside the task run by hand on i2", live)
	}
	d := h.Deployment("web", id)
	if d.GetStatus() != scheduler.StatusCompleted || d.GetTotal() != 1 || d.GetComplete() != 1 || d.GetBlocked() != 3 ||
		!strings.HasPrefix(d.GetStatusReason(), "1/1 complete; 3 instances blocked (i2: host port 8080/tcp is taken by task 01jhand; i3: ") {
		t.Fatalf("deployment %s %d/%d blocked %d: %q", d.GetStatus(), d.GetComplete(), d.GetTotal(), d.GetBlocked(), d.GetStatusReason())
	}
	var blocked []string
	for _, b := range h.EnvStatus("web").GetBlocked() {
		blocked = append(blocked, b.GetInstance()+": "+b.GetReason())
	}
	if len(blocked) != 3 || blocked[0] != "i2: host port 8080/tcp is taken by task 01jhand" {
		t.Fatalf("the environment's status lists blocked %q", blocked)
	}
	state, err := h.Ops.EnvironmentState(h.Ctx, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	if state.GetSummary() != "4 desired: 1 active, 0 launching, 0 unhealthy, 3 blocked" {
		t.Fatalf("summary %q", state.GetSummary())
	}
	for _, is := range state.GetInstances() {
		if is.GetInstance() == "i2" && (is.GetState() != scheduler.ViewBlocked || is.GetReason() != "host port 8080/tcp is taken by task 01jhand") {
			t.Fatalf("i2 in the view: %v", is)
		}
	}

	// The task run by hand stops: its change runs the blocked environment
	// at once (it is no task of it), and i2 gets web:1.
	stopped := h.Report(byHand, &pborch.TaskStatus{LastStatus: orchestrator.StatusStopped, StopReason: "stopped by user"})
	if got := mapped(h, stopped); !slices.Contains(got, "web") {
		t.Fatalf("a task stopping on i2 maps to %v, not to web, which is blocked there", got)
	}
	h.Settle("web")
	if live := h.Live(); live["i2"] != td {
		t.Fatalf("live %v: i2 did not get web:1 once 8080 was free", live)
	}
	if got := h.EnvStatus("web").GetBlocked(); len(got) != 2 {
		t.Fatalf("blocked %v, want i3 and i4 alone", got)
	}

	// A rolling update to a revision publishing the same port replaces
	// each task: the one replaced does not count against its successor.
	td2 := bridgeTaskDefinition(h, "default", "web", 2, 8080)
	if _, err := h.Ops.UpdateEnvironment(h.Ctx, "default", "web", schedulertest.Spec("web", td2, 50, "", "role=logger")); err != nil {
		t.Fatal(err)
	}
	id = h.Deploy("web", "")
	h.Settle("web")
	if live := h.Live(); live["i1"] != td2 || live["i2"] != td2 {
		t.Fatalf("live %v after the rolling update, want web:2 on i1 and i2", live)
	}
	if d := h.Deployment("web", id); d.GetStatus() != scheduler.StatusCompleted || d.GetComplete() != 2 || d.GetBlocked() != 2 {
		t.Fatalf("deployment %s %d/%d blocked %d: %s", d.GetStatus(), d.GetComplete(), d.GetTotal(), d.GetBlocked(), d.GetStatusReason())
	}

	// Another environment wanting 8080 on the same instances is blocked
	// by web's tasks, and says so; everything it could place, it did
	// (nothing).
	api := bridgeTaskDefinition(h, "default", "api", 1, 8080)
	if _, err := h.Ops.CreateEnvironment(h.Ctx, "default", schedulertest.Spec("api", api, 0, "", "role=logger", "network.bridge=true")); err != nil {
		t.Fatal(err)
	}
	id = h.Deploy("api", "")
	h.Settle("api")
	d = h.Deployment("api", id)
	if d.GetStatus() != scheduler.StatusCompleted || d.GetTotal() != 0 || !strings.HasPrefix(d.GetStatusReason(), "nothing placed: 2 instances blocked (i1: host port 8080/tcp is taken by task web-") {
		t.Fatalf("deployment of api %s %d/%d: %q", d.GetStatus(), d.GetComplete(), d.GetTotal(), d.GetStatusReason())
	}
	for name, task := range h.Tasks() {
		if task.GetEnvironment() == "api" {
			t.Fatalf("api placed %s on %s, where web holds 8080", name, task.GetInstance())
		}
	}
}

// TestHostPortPlacementsOfTwoEnvironmentsAtOnce runs two environments that
// publish the same host port on the same instance on two workers at once,
// many times: one of them places there, never both.
func TestHostPortPlacementsOfTwoEnvironmentsAtOnce(t *testing.T) {
	for round := range 20 {
		h := schedulertest.New(t)
		h.Instance("i1", map[string]string{"role": "logger", orchestrator.AttrNetworkBridge: "true"})
		for _, env := range []string{"a", "b"} {
			td := bridgeTaskDefinition(h, "default", env, 1, 8080)
			if _, err := h.Ops.CreateEnvironment(h.Ctx, "default", schedulertest.Spec(env, td, 0, "", "role=logger")); err != nil {
				t.Fatal(err)
			}
			h.Deploy(env, "")
		}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, env := range []string{"a", "b"} {
			wg.Go(func() {
				errs[i] = h.Ctl.Reconciler.Reconcile(h.Ctx, controller.Request{ID: scheduler.EnvironmentID("default", env)})
			})
		}
		wg.Wait()
		for _, err := range errs {
			var rq *controller.RequeueAfterError
			if err != nil && !errors.As(err, &rq) {
				t.Fatal(err)
			}
		}
		if n := len(h.Tasks()); n != 1 {
			t.Fatalf("round %d: %d tasks placed on i1, all publishing 8080/tcp; want 1", round, n)
		}
	}
}
