package scheduler_test

import (
	"fmt"
	"testing"
	"time"
	"trellis.dev/trellis/internal/controller"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/scheduler"
)

// fleet registers instances i1..i4; i1-i3 are loggers.
func fleet(h *harness) {
	for _, n := range []string{"i1", "i2", "i3"} {
		h.instance(n, map[string]string{"role": "logger"})
	}
	h.instance("i4", map[string]string{"role": "web"})
}

func spec(name, taskdef string, mhp int32, mht string, filters ...string) scheduler.Spec {
	return scheduler.Spec{Name: name, TaskDefinition: taskdef,
		InstanceGroup: &pbscheduler.InstanceGroup{Attributes: filters},
		Deployment:    &pbscheduler.DeploymentConfig{MinHealthyPercent: proto.Int32(mhp), MinHealthyTime: mht, HealthyDeadline: "1m", ProgressDeadline: "5m"}}
}

func (h *harness) deploy(env, version string) string {
	h.t.Helper()
	d, err := h.ops.StartDeployment(h.ctx, "default", env, version)
	if err != nil {
		h.t.Fatal(err)
	}
	return d.GetId().GetName()
}

func TestDeployPlacesOnePerMatchingInstance(t *testing.T) {
	h := newHarness(t)
	fleet(h)
	td := h.taskdef("ls", 1)
	if _, err := h.ops.CreateEnvironment(h.ctx, "default", spec("ls", td, 75, "", "role=logger")); err != nil {
		t.Fatal(err)
	}
	h.reconcile("ls")
	if len(h.tasks()) != 0 {
		t.Fatal("an inactive environment placed tasks before any deployment")
	}
	id := h.deploy("ls", "")
	h.reconcile("ls")
	if got := h.live(); len(got) != 3 || got["i4"] != "" {
		t.Fatalf("live tasks %v, want one on each of i1-i3", got)
	}
	if d := h.deployment("ls", id); d.GetStatus() != scheduler.StatusInProgress || d.GetTotal() != 3 || d.GetComplete() != 0 {
		t.Fatalf("deployment %s %d/%d, want in-progress 0/3", d.GetStatus(), d.GetComplete(), d.GetTotal())
	}
	if got := h.summary("ls"); got != "3 desired: 0 active, 3 launching, 0 unhealthy" {
		t.Fatalf("summary %q", got)
	}
	h.settle("ls")
	d := h.deployment("ls", id)
	if d.GetStatus() != scheduler.StatusCompleted || d.GetComplete() != 3 {
		t.Fatalf("deployment %s %d/%d, want completed 3/3", d.GetStatus(), d.GetComplete(), d.GetTotal())
	}
	if e := h.env("ls"); e.GetStatus() != scheduler.EnvActive || e.GetHealth() != scheduler.HealthHealthy || e.GetActiveDeployment() != "" {
		t.Fatalf("environment %v", e)
	}
	if got := h.summary("ls"); got != "3 desired: 3 active, 0 launching, 0 unhealthy" {
		t.Fatalf("summary %q", got)
	}
}

func TestMonitorsFollowTheFleet(t *testing.T) {
	h := newHarness(t)
	fleet(h)
	td := h.taskdef("ls", 1)
	if _, err := h.ops.CreateEnvironment(h.ctx, "default", spec("ls", td, 75, "", "role=logger")); err != nil {
		t.Fatal(err)
	}
	h.deploy("ls", "")
	h.settle("ls")

	// A new matching instance gets the task through a new-instance
	// deployment.
	h.instance("i5", map[string]string{"role": "logger"})
	h.settle("ls")
	if h.live()["i5"] != td {
		t.Fatalf("the new instance i5 runs %q", h.live()["i5"])
	}
	if d := h.deploymentsOf("ls")[0]; d.GetType() != scheduler.DeploymentNewInstance || d.GetStatus() != scheduler.StatusCompleted || d.GetTotal() != 1 {
		t.Fatalf("latest deployment %v, want a completed new-instance deployment of 1", d)
	}
	// An instance that stops matching has its task stopped.
	h.instance("i1", map[string]string{"role": "web"})
	h.settle("ls")
	if _, ok := h.live()["i1"]; ok {
		t.Fatal("the task on i1 still runs after i1 stopped matching")
	}
	// A task that dies is replaced through health-repair.
	h.kill("i2")
	h.settle("ls")
	if h.live()["i2"] != td {
		t.Fatal("the dead task on i2 was not replaced")
	}
	if d := h.deploymentsOf("ls")[0]; d.GetType() != scheduler.DeploymentHealthRepair || d.GetStatus() != scheduler.StatusCompleted {
		t.Fatalf("latest deployment %v, want a completed health-repair", d)
	}
	// Draining stops it; a down instance keeps its (lost) task.
	h.setInstanceStatus("i3", orchestrator.InstanceDraining)
	h.setInstanceStatus("i5", orchestrator.InstanceDown)
	h.settle("ls", "i5")
	live := h.live()
	if _, ok := live["i3"]; ok {
		t.Fatal("the task on draining i3 still runs")
	}
	if live["i5"] != td {
		t.Fatal("the task on down i5 was stopped; its agent may return with it")
	}
	// Stopped deployments make the environment inactive: a new instance
	// gets nothing.
	h.setInstanceStatus("i3", orchestrator.InstanceReady)
	id := h.deploy("ls", "")
	h.reconcile("ls")
	if d := h.deployment("ls", id); d.GetStatus() != scheduler.StatusInProgress {
		t.Fatalf("deployment %s, want in-progress (i3 awaits its task)", d.GetStatus())
	}
	if _, err := h.ops.StopDeployment(h.ctx, "default", "ls", id); err != nil {
		t.Fatal(err)
	}
	h.instance("i6", map[string]string{"role": "logger"})
	h.settle("ls")
	if _, ok := h.live()["i6"]; ok {
		t.Fatal("an inactive environment placed a task on a new instance")
	}
}

func TestRollingUpdateKeepsMinHealthy(t *testing.T) {
	h := newHarness(t)
	for i := range 8 {
		h.instance("n"+string(rune('a'+i)), map[string]string{})
	}
	v1, v2 := h.taskdef("ls", 1), h.taskdef("ls", 2)
	if _, err := h.ops.CreateEnvironment(h.ctx, "default", spec("ls", v1, 75, "10s")); err != nil {
		t.Fatal(err)
	}
	h.deploy("ls", "")
	h.settle("ls")
	h.clock.Advance(10 * time.Second)
	h.settle("ls")
	if _, err := h.ops.UpdateEnvironment(h.ctx, "default", "ls", scheduler.Spec{TaskDefinition: v2}); err != nil {
		t.Fatal(err)
	}
	id := h.deploy("ls", "")
	batches := 0
	for step := 0; ; step++ {
		if step > 40 {
			t.Fatal("the rolling update does not finish")
		}
		h.settle("ls")
		// Never more than the batch (25% of 8 = 2) without a task healthy
		// for min_healthy_time.
		unavailable := 0
		for _, t := range h.tasks() {
			if t.GetLastStatus() != orchestrator.StatusStopped && t.GetTaskDefinition() == v2 && h.clock.Now().Sub(t.GetReportedAt().AsTime()) < 10*time.Second {
				unavailable++
			}
		}
		if unavailable > 2 {
			t.Fatalf("%d instances unavailable at once, over the batch of 2", unavailable)
		}
		d := h.deployment("ls", id)
		if d.GetStatus() == scheduler.StatusCompleted {
			break
		}
		if h.requeue <= 0 || h.requeue > 10*time.Second {
			t.Fatalf("waiting on min_healthy_time, the reconciler asked to run again after %v", h.requeue)
		}
		h.clock.Advance(h.requeue)
		batches++
	}
	if batches != 4 {
		t.Fatalf("%d batches, want 4 (8 instances, 2 at a time)", batches)
	}
	for inst, def := range h.live() {
		if def != v2 {
			t.Fatalf("%s runs %s after the rollout", inst, def)
		}
	}
}

func TestUnhealthyDeploymentRollsBack(t *testing.T) {
	h := newHarness(t)
	fleet(h)
	v1, v2 := h.taskdef("ls", 1), h.taskdef("ls", 2)
	s := spec("ls", v1, 0, "", "role=logger")
	s.Deployment.AutoRollback = true
	if _, err := h.ops.CreateEnvironment(h.ctx, "default", s); err != nil {
		t.Fatal(err)
	}
	h.deploy("ls", "")
	h.settle("ls")
	if _, err := h.ops.UpdateEnvironment(h.ctx, "default", "ls", scheduler.Spec{TaskDefinition: v2}); err != nil {
		t.Fatal(err)
	}
	bad := h.deploy("ls", "")
	h.reconcile("ls") // min_healthy_percent 0: every old task is replaced
	h.stopsOnly()
	// The new task never starts on i1 (its agent does nothing with it).
	h.settle("ls", "i1")
	if d := h.deployment("ls", bad); d.GetStatus() != scheduler.StatusInProgress {
		t.Fatalf("deployment %s before the healthy deadline", d.GetStatus())
	}
	h.clock.Advance(time.Minute)
	h.settle("ls", "i1")
	d := h.deployment("ls", bad)
	if d.GetStatus() != scheduler.StatusUnhealthy || !containsStr(d.GetStatusReason(), "was not healthy within 1m0s") {
		t.Fatalf("deployment %s (%s), want unhealthy: not healthy within 1m", d.GetStatus(), d.GetStatusReason())
	}
	latest := h.deploymentsOf("ls")[0]
	if latest.GetRollbackOf() != bad || latest.GetVersionNumber() != 1 {
		t.Fatalf("latest deployment %v, want an auto rollback to version 1", latest)
	}
	h.settle("ls")
	if latest := h.deploymentsOf("ls")[0]; latest.GetStatus() != scheduler.StatusCompleted {
		t.Fatalf("the rollback ended %s (%s)", latest.GetStatus(), latest.GetStatusReason())
	}
	for inst, def := range h.live() {
		if def != v1 {
			t.Fatalf("%s runs %s after the rollback", inst, def)
		}
	}
	if e := h.env("ls"); e.GetHealth() != scheduler.HealthHealthy || e.GetDesiredVersion() == e.GetLatestVersion() {
		t.Fatalf("environment health %s, desired %s latest %s", e.GetHealth(), e.GetDesiredVersion(), e.GetLatestVersion())
	}
	// The failed deployment names its rollback and the version it returns
	// to, so that whoever followed it is told; the environment names its
	// versions by number as well.
	if d := h.deployment("ls", bad); d.GetRollbackDeployment() == "" || d.GetRollbackVersionNumber() != 1 {
		t.Fatalf("the failed deployment names rollback %q to version %d, want the auto rollback to version 1", d.GetRollbackDeployment(), d.GetRollbackVersionNumber())
	} else if rb := h.deployment("ls", d.GetRollbackDeployment()); rb.GetRollbackOf() != bad {
		t.Fatalf("deployment %s is no rollback of %s: %v", d.GetRollbackDeployment(), bad, rb)
	}
	if e := h.env("ls"); e.GetDesiredVersionNumber() != 1 || e.GetLastCompletedVersionNumber() != 1 || e.GetDesiredTaskDefinition() != v1 || e.GetVersionCount() != 2 {
		t.Fatalf("environment after the rollback: desired %d (%s), last completed %d, latest %d; want desired 1 (%s), last completed 1, latest 2",
			e.GetDesiredVersionNumber(), e.GetDesiredTaskDefinition(), e.GetLastCompletedVersionNumber(), e.GetVersionCount(), v1)
	}
	// GetEnvironment answers with the desired version too: its spec is
	// what runs, where the environment's own is the latest version's.
	info, err := h.ops.GetEnvironment(h.ctx, "default", "ls")
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := resource.DecodeData[*pbscheduler.EnvironmentVersion](info.DesiredVersion); v.GetNumber() != 1 || v.GetTaskDefinition() != v1 {
		t.Fatalf("GetEnvironment's desired version %v, want number 1 of %s", v, v1)
	}
}

// A first deployment that fails has no earlier version to return to: its
// reason says so instead of leaving auto_rollback's silence to be guessed.
func TestFailedFirstDeploymentSaysThereIsNothingToRollBackTo(t *testing.T) {
	h := newHarness(t)
	fleet(h)
	s := spec("ls", h.taskdef("ls", 1), 0, "", "role=logger")
	s.Deployment.AutoRollback = true
	if _, err := h.ops.CreateEnvironment(h.ctx, "default", s); err != nil {
		t.Fatal(err)
	}
	id := h.deploy("ls", "")
	h.settle("ls", "i1")
	h.clock.Advance(time.Minute)
	h.settle("ls", "i1")
	d := h.deployment("ls", id)
	if d.GetStatus() != scheduler.StatusUnhealthy || d.GetRollbackDeployment() != "" ||
		!containsStr(d.GetStatusReason(), "; auto_rollback: no version has completed a deployment, so there is none to roll back to") {
		t.Fatalf("deployment %s (%s), rollback %q; want unhealthy, no rollback, and why", d.GetStatus(), d.GetStatusReason(), d.GetRollbackDeployment())
	}
	if n := len(h.deploymentsOf("ls")); n != 1 {
		t.Fatalf("%d deployments, want only the failed one", n)
	}
}

// A deployment made while no instance of the group is up completes, as
// the version is now the desired one, but says that it placed nothing and
// why; the version is placed on each instance as it comes back.
func TestDeploymentWithNoInstanceUpSaysNothingPlaced(t *testing.T) {
	h := newHarness(t)
	fleet(h)
	td := h.createLoggers("ls", 1)
	for _, n := range []string{"i1", "i2", "i3"} {
		h.setInstanceStatus(n, orchestrator.InstanceDown)
	}
	id := h.deploy("ls", "")
	h.settle("ls")
	d := h.deployment("ls", id)
	want := "nothing placed: no instance of the instance group (cluster default, role=logger) is ready (3 down: i1, i2, i3); the version is placed on each one that becomes ready"
	if d.GetStatus() != scheduler.StatusCompleted || d.GetTotal() != 0 || d.GetStatusReason() != want {
		t.Fatalf("deployment %s %d/%d (%s)\nwant completed 0/0 (%s)", d.GetStatus(), d.GetComplete(), d.GetTotal(), d.GetStatusReason(), want)
	}
	h.setInstanceStatus("i2", orchestrator.InstanceReady)
	h.settle("ls")
	if live := h.live(); len(live) != 1 || live["i2"] != td {
		t.Fatalf("live tasks %v, want %s on i2, back up", live, td)
	}

	// A group nothing is in: the reason says so.
	if _, err := h.ops.CreateEnvironment(h.ctx, "default", spec("gpu", h.taskdef("gpu", 1), 75, "", "role=gpu")); err != nil {
		t.Fatal(err)
	}
	id = h.deploy("gpu", "")
	h.settle("gpu")
	if d := h.deployment("gpu", id); d.GetStatus() != scheduler.StatusCompleted ||
		d.GetStatusReason() != "nothing placed: no instance is in the instance group (cluster default, role=gpu); the version is placed on each instance that joins it" {
		t.Fatalf("deployment %s (%s)", d.GetStatus(), d.GetStatusReason())
	}
}

func TestNewLeaderResumesWithoutPlacingTwice(t *testing.T) {
	h := newHarness(t)
	for i := range 6 {
		h.instance("n"+string(rune('a'+i)), map[string]string{})
	}
	v1, v2 := h.taskdef("ls", 1), h.taskdef("ls", 2)
	if _, err := h.ops.CreateEnvironment(h.ctx, "default", spec("ls", v1, 50, "")); err != nil {
		t.Fatal(err)
	}
	h.deploy("ls", "")
	h.settle("ls")
	if _, err := h.ops.UpdateEnvironment(h.ctx, "default", "ls", scheduler.Spec{TaskDefinition: v2}); err != nil {
		t.Fatal(err)
	}
	id := h.deploy("ls", "")
	h.reconcile("ls") // the first batch of 3 is replaced
	h.failover()
	// The old leader's last decision is applied once more by a new one
	// that read the same state: the placements are refused, not doubled.
	h.reconcile("ls")
	h.reconcile("ls")
	h.live()
	placed := 0
	for _, task := range h.tasks() {
		if task.GetTaskDefinition() == v2 {
			placed++
		}
	}
	if placed != 3 {
		t.Fatalf("%d tasks of %s after the failover, want the first batch of 3", placed, v2)
	}
	h.settle("ls")
	if d := h.deployment("ls", id); d.GetStatus() != scheduler.StatusCompleted || d.GetComplete() != 6 {
		t.Fatalf("deployment %s %d/%d", d.GetStatus(), d.GetComplete(), d.GetTotal())
	}
}

func TestDeleteStopsTasksThenRemoves(t *testing.T) {
	h := newHarness(t)
	fleet(h)
	td := h.taskdef("ls", 1)
	if _, err := h.ops.CreateEnvironment(h.ctx, "default", spec("ls", td, 75, "", "role=logger")); err != nil {
		t.Fatal(err)
	}
	id := h.deploy("ls", "")
	h.reconcile("ls")
	_, err := h.ops.DeleteEnvironment(h.ctx, "default", "ls")
	requireCode(t, err, codes.FailedPrecondition, "in progress: stop it first")
	h.settle("ls")
	if d := h.deployment("ls", id); d.GetStatus() != scheduler.StatusCompleted {
		t.Fatalf("deployment %s", d.GetStatus())
	}
	if _, err := h.ops.DeleteEnvironment(h.ctx, "default", "ls"); err != nil {
		t.Fatal(err)
	}
	h.reconcile("ls")
	for name, task := range h.tasks() {
		if task.GetDesiredStatus() != orchestrator.StatusStopped {
			t.Fatalf("task %s still desired %s while its environment is deleted", name, task.GetDesiredStatus())
		}
	}
	h.settle("ls")
	if _, err := h.ops.GetEnvironment(h.ctx, "default", "ls"); err == nil {
		t.Fatal("the environment is still there after its tasks stopped")
	}
	// The last environment of the namespace took its guard with it, so
	// the guard does not keep the namespace from being deleted.
	if _, err := h.api.Read(h.ctx, &pbresource.ReadRequest{Id: scheduler.GuardID("default")}); status.Code(err) != codes.NotFound {
		t.Fatalf("the namespace's environment guard after its last environment: %v, want NotFound", err)
	}
}

// TestSteadyStateWritesNothing: once converged, a reconcile (every
// resync, every unrelated change) reads and decides but writes nothing.
func TestSteadyStateWritesNothing(t *testing.T) {
	h := newHarness(t)
	fleet(h)
	td := h.taskdef("ls", 1)
	if _, err := h.ops.CreateEnvironment(h.ctx, "default", spec("ls", td, 75, "", "role=logger")); err != nil {
		t.Fatal(err)
	}
	h.deploy("ls", "")
	h.settle("ls")
	before := h.fingerprint()
	if err := h.ctl.Reconciler.Reconcile(h.ctx, controller.Request{ID: scheduler.EnvironmentID("default", "ls")}); err != nil {
		t.Fatal(err)
	}
	if after := h.fingerprint(); after != before {
		t.Fatalf("a converged reconcile wrote:\nbefore %s\nafter  %s", before, after)
	}
}

// TestInstanceDownThroughADeploymentIsBroughtUpToDate: an instance down
// for a whole rollout comes back with the old version, and gets the new
// one once it is back.
func TestInstanceDownThroughADeploymentIsBroughtUpToDate(t *testing.T) {
	h := newHarness(t)
	fleet(h)
	v1, v2 := h.taskdef("ls", 1), h.taskdef("ls", 2)
	if _, err := h.ops.CreateEnvironment(h.ctx, "default", spec("ls", v1, 50, "", "role=logger")); err != nil {
		t.Fatal(err)
	}
	h.deploy("ls", "")
	h.settle("ls")
	h.setInstanceStatus("i3", orchestrator.InstanceDown)
	if _, err := h.ops.UpdateEnvironment(h.ctx, "default", "ls", scheduler.Spec{TaskDefinition: v2}); err != nil {
		t.Fatal(err)
	}
	id := h.deploy("ls", "")
	h.settle("ls", "i3")
	if d := h.deployment("ls", id); d.GetStatus() != scheduler.StatusCompleted || d.GetTotal() != 2 {
		t.Fatalf("deployment %s %d/%d, want completed over the 2 instances that are up", d.GetStatus(), d.GetComplete(), d.GetTotal())
	}
	if h.live()["i3"] != v1 {
		t.Fatal("the task of down i3 was touched")
	}
	h.setInstanceStatus("i3", orchestrator.InstanceReady)
	h.settle("ls")
	for inst, def := range h.live() {
		if def != v2 {
			t.Fatalf("%s runs %s once back, want %s", inst, def, v2)
		}
	}
}

// A task lost with its instance before it ever ran does not fail the
// deployment: it is placed again once the instance is back. One lost
// after it ran does.
func TestTaskLostBeforeItRanIsPlacedAgain(t *testing.T) {
	h := newHarness(t)
	fleet(h)
	td := h.createLoggers("ls", 1)
	id := h.deploy("ls", "")
	h.reconcile("ls")
	// i1 misses its heartbeats before its agent starts the task: the
	// servers mark it LOST; back, the agent has no record of it.
	lostBeforeRunning := func(instance string) {
		list, _ := h.api.List(h.ctx, &pbresource.ListRequest{Type: orchestrator.TaskType, Tenancy: &pbresource.Tenancy{Namespace: "default"}})
		for _, r := range list.GetResources() {
			tk, _ := resource.DecodeData[*pborch.Task](r)
			if tk.GetInstance() == instance && tk.GetLastStatus() != orchestrator.StatusStopped {
				tk.LastStatus, tk.StopReason = orchestrator.StatusStopped, orchestrator.LostReason(instance)
				h.write(r.GetId(), r.GetOwner(), tk, r.GetVersion())
				return
			}
		}
		h.t.Fatalf("no live task on %s", instance)
	}
	lostBeforeRunning("i1")
	h.settle("ls")
	if d := h.deployment("ls", id); d.GetStatus() != scheduler.StatusCompleted {
		t.Fatalf("deployment %s (%s), want completed with the lost task placed again", d.GetStatus(), d.GetStatusReason())
	}
	if h.live()["i1"] != td {
		t.Fatalf("i1 runs %q, want %s", h.live()["i1"], td)
	}

	// The same after the task ran: a failure of the deployment.
	if _, err := h.ops.UpdateEnvironment(h.ctx, "default", "ls", scheduler.Spec{TaskDefinition: h.taskdef("ls", 2)}); err != nil {
		t.Fatal(err)
	}
	id = h.deploy("ls", "")
	h.reconcile("ls") // one of three is replaced
	h.agents()
	for inst, def := range h.live() {
		if def == h.taskdef("ls", 2) {
			h.kill(inst)
			break
		}
	}
	h.settle("ls")
	if d := h.deployment("ls", id); d.GetStatus() != scheduler.StatusUnhealthy {
		t.Fatalf("deployment %s, want unhealthy: a task it placed died after it ran", d.GetStatus())
	}
}

// TestFailedDeploymentIsNotCarriedOn: after a deployment fails, the
// scheduler does not go on replacing tasks with its version.
func TestFailedDeploymentIsNotCarriedOn(t *testing.T) {
	h := newHarness(t)
	fleet(h)
	v1, v2 := h.taskdef("ls", 1), h.taskdef("ls", 2)
	if _, err := h.ops.CreateEnvironment(h.ctx, "default", spec("ls", v1, 60, "", "role=logger")); err != nil {
		t.Fatal(err)
	}
	h.deploy("ls", "")
	h.settle("ls")
	if _, err := h.ops.UpdateEnvironment(h.ctx, "default", "ls", scheduler.Spec{TaskDefinition: v2}); err != nil {
		t.Fatal(err)
	}
	id := h.deploy("ls", "")
	h.reconcile("ls") // one of three is replaced first
	h.stopsOnly()
	h.settle("ls", "i1", "i2", "i3") // the new task never starts
	h.clock.Advance(time.Minute)
	h.settle("ls", "i1", "i2", "i3")
	if d := h.deployment("ls", id); d.GetStatus() != scheduler.StatusUnhealthy {
		t.Fatalf("deployment %s, want unhealthy", d.GetStatus())
	}
	h.settle("ls")
	n := 0
	for _, def := range h.live() {
		if def == v1 {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%d instances still run %s after the failed deployment, want 2 (it stopped after its first batch)", n, v1)
	}
}

// TestNewTermForgetsTheCache: a server that led, lost leadership while
// another server changed things, and leads again acts on the store, not
// on what its watches saw in the earlier term.
func TestNewTermForgetsTheCache(t *testing.T) {
	h := newHarness(t)
	fleet(h)
	td := h.taskdef("ls", 1)
	if _, err := h.ops.CreateEnvironment(h.ctx, "default", spec("ls", td, 75, "", "role=logger")); err != nil {
		t.Fatal(err)
	}
	h.deploy("ls", "")
	h.settle("ls")

	// While another server leads, the task on i2 dies: this server's
	// watches are closed and do not see it.
	list, err := h.api.List(h.ctx, &pbresource.ListRequest{Type: orchestrator.TaskType, Tenancy: &pbresource.Tenancy{Namespace: "default"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range list.GetResources() {
		task, _ := resource.DecodeData[*pborch.Task](r)
		if task.GetInstance() == "i2" {
			task.LastStatus = orchestrator.StatusStopped
			data, _ := anypb.New(task)
			if _, err := h.api.Write(h.ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: r.GetId(), Owner: r.GetOwner(), Version: r.GetVersion(), Data: data}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	h.ctl.OnStart() // leading again
	h.reconcile("ls")
	if _, ok := h.live()["i2"]; !ok {
		t.Fatal("the task that died while another server led was not replaced")
	}
}

// A deployment larger than one write batch places every instance in one
// run (its batches go to Raft together) and records its progress with
// the last of them.
func TestDeploymentOfManyWriteBatches(t *testing.T) {
	if testing.Short() {
		t.Skip("2,300 instances")
	}
	h := newHarness(t)
	const n = 2300 // three write batches: 1,000, 1,000 and 300 with the progress
	for i := range n {
		h.instance(fmt.Sprintf("i%d", i), map[string]string{"role": "logger"})
	}
	td := h.taskdef("ls", 1)
	if _, err := h.ops.CreateEnvironment(h.ctx, "default", spec("ls", td, 75, "", "role=logger")); err != nil {
		t.Fatal(err)
	}
	id := h.deploy("ls", "")
	h.reconcile("ls")
	if got := h.live(); len(got) != n {
		t.Fatalf("%d live tasks after one deployment run, want %d", len(got), n)
	}
	if d := h.deployment("ls", id); d.GetStatus() != scheduler.StatusInProgress || d.GetTotal() != n {
		t.Fatalf("deployment %s %d/%d, want in-progress of %d", d.GetStatus(), d.GetComplete(), d.GetTotal(), n)
	}
	h.settle("ls")
	if d := h.deployment("ls", id); d.GetStatus() != scheduler.StatusCompleted || d.GetComplete() != n {
		t.Fatalf("deployment %s %d/%d, want completed %d/%d", d.GetStatus(), d.GetComplete(), d.GetTotal(), n, n)
	}
}
