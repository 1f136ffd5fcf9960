package controllers_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/scheduler"
	"trellis.dev/trellis/internal/scheduler/operations"
	"trellis.dev/trellis/internal/scheduler/schedulertest"
)

func TestDeployPlacesOnePerMatchingInstance(t *testing.T) {
	h := schedulertest.New(t)
	h.Fleet()
	td := h.TaskDefinition("ls", 1)
	if _, err := h.Ops.CreateEnvironment(h.Ctx, "default", schedulertest.Spec("ls", td, 75, "", "role=logger")); err != nil {
		t.Fatal(err)
	}
	h.Reconcile("ls")
	if len(h.Tasks()) != 0 {
		t.Fatal("an inactive environment placed tasks before any deployment")
	}
	id := h.Deploy("ls", "")
	h.Reconcile("ls")
	if got := h.Live(); len(got) != 3 || got["i4"] != "" {
		t.Fatalf("live tasks %v, want one on each of i1-i3", got)
	}
	if d := h.Deployment("ls", id); d.GetStatus() != scheduler.StatusInProgress || d.GetTotal() != 3 || d.GetComplete() != 0 {
		t.Fatalf("deployment %s %d/%d, want in-progress 0/3", d.GetStatus(), d.GetComplete(), d.GetTotal())
	}
	if got := h.Summary("ls"); got != "3 desired: 0 active, 3 launching, 0 unhealthy" {
		t.Fatalf("summary %q", got)
	}
	h.Settle("ls")
	d := h.Deployment("ls", id)
	if d.GetStatus() != scheduler.StatusCompleted || d.GetComplete() != 3 {
		t.Fatalf("deployment %s %d/%d, want completed 3/3", d.GetStatus(), d.GetComplete(), d.GetTotal())
	}
	if e := h.EnvStatus("ls"); e.GetStatus() != scheduler.EnvActive || e.GetHealth() != scheduler.HealthHealthy || e.GetActiveDeployment() != "" {
		t.Fatalf("environment status %v", e)
	}
	if got := h.Summary("ls"); got != "3 desired: 3 active, 0 launching, 0 unhealthy" {
		t.Fatalf("summary %q", got)
	}
}

func TestMonitorsFollowTheFleet(t *testing.T) {
	h := schedulertest.New(t)
	h.Fleet()
	td := h.TaskDefinition("ls", 1)
	if _, err := h.Ops.CreateEnvironment(h.Ctx, "default", schedulertest.Spec("ls", td, 75, "", "role=logger")); err != nil {
		t.Fatal(err)
	}
	h.Deploy("ls", "")
	h.Settle("ls")

	// A new matching instance gets the task through a new-instance
	// deployment.
	h.Instance("i5", map[string]string{"role": "logger"})
	h.Settle("ls")
	if h.Live()["i5"] != td {
		t.Fatalf("the new instance i5 runs %q", h.Live()["i5"])
	}
	if d := h.DeploymentsOf("ls")[0]; d.GetType() != scheduler.DeploymentNewInstance || d.GetStatus() != scheduler.StatusCompleted || d.GetTotal() != 1 {
		t.Fatalf("latest deployment %v, want a completed new-instance deployment of 1", d)
	}
	// An instance that stops matching has its task stopped.
	h.Instance("i1", map[string]string{"role": "web"})
	h.Settle("ls")
	if _, ok := h.Live()["i1"]; ok {
		t.Fatal("the task on i1 still runs after i1 stopped matching")
	}
	// A task that dies is replaced through health-repair.
	h.Kill("i2")
	h.Settle("ls")
	if h.Live()["i2"] != td {
		t.Fatal("the dead task on i2 was not replaced")
	}
	if d := h.DeploymentsOf("ls")[0]; d.GetType() != scheduler.DeploymentHealthRepair || d.GetStatus() != scheduler.StatusCompleted {
		t.Fatalf("latest deployment %v, want a completed health-repair", d)
	}
	// Draining stops it; a down instance keeps its (lost) task.
	h.SetInstanceStatus("i3", orchestrator.InstanceDraining)
	h.SetInstanceStatus("i5", orchestrator.InstanceDown)
	h.Settle("ls", "i5")
	live := h.Live()
	if _, ok := live["i3"]; ok {
		t.Fatal("the task on draining i3 still runs")
	}
	if live["i5"] != td {
		t.Fatal("the task on down i5 was stopped; its agent may return with it")
	}
	// Stopped deployments make the environment inactive: a new instance
	// gets nothing.
	h.SetInstanceStatus("i3", orchestrator.InstanceReady)
	id := h.Deploy("ls", "")
	h.Reconcile("ls")
	if d := h.Deployment("ls", id); d.GetStatus() != scheduler.StatusInProgress {
		t.Fatalf("deployment %s, want in-progress (i3 awaits its task)", d.GetStatus())
	}
	if _, err := h.Ops.StopDeployment(h.Ctx, "default", "ls", id); err != nil {
		t.Fatal(err)
	}
	h.Instance("i6", map[string]string{"role": "logger"})
	h.Settle("ls")
	if _, ok := h.Live()["i6"]; ok {
		t.Fatal("an inactive environment placed a task on a new instance")
	}
}

func TestRollingUpdateKeepsMinHealthy(t *testing.T) {
	h := schedulertest.New(t)
	for i := range 8 {
		h.Instance("n"+string(rune('a'+i)), map[string]string{})
	}
	v1, v2 := h.TaskDefinition("ls", 1), h.TaskDefinition("ls", 2)
	if _, err := h.Ops.CreateEnvironment(h.Ctx, "default", schedulertest.Spec("ls", v1, 75, "10s")); err != nil {
		t.Fatal(err)
	}
	h.Deploy("ls", "")
	h.Settle("ls")
	h.Clock.Advance(10 * time.Second)
	h.Settle("ls")
	if _, err := h.Ops.UpdateEnvironment(h.Ctx, "default", "ls", operations.Spec{TaskDefinition: v2}); err != nil {
		t.Fatal(err)
	}
	id := h.Deploy("ls", "")
	batches := 0
	for step := 0; ; step++ {
		if step > 40 {
			t.Fatal("the rolling update does not finish")
		}
		h.Settle("ls")
		// Never more than the batch (25% of 8 = 2) without a task healthy
		// for min_healthy_time.
		unavailable := 0
		for _, t := range h.Tasks() {
			if t.Status.GetLastStatus() != orchestrator.StatusStopped && t.GetTaskDefinition() == v2 && h.Clock.Now().Sub(t.Status.GetReportedAt().AsTime()) < 10*time.Second {
				unavailable++
			}
		}
		if unavailable > 2 {
			t.Fatalf("%d instances unavailable at once, over the batch of 2", unavailable)
		}
		d := h.Deployment("ls", id)
		if d.GetStatus() == scheduler.StatusCompleted {
			break
		}
		if h.Requeue <= 0 || h.Requeue > 10*time.Second {
			t.Fatalf("waiting on min_healthy_time, the reconciler asked to run again after %v", h.Requeue)
		}
		h.Clock.Advance(h.Requeue)
		batches++
	}
	if batches != 4 {
		t.Fatalf("%d batches, want 4 (8 instances, 2 at a time)", batches)
	}
	for inst, def := range h.Live() {
		if def != v2 {
			t.Fatalf("%s runs %s after the rollout", inst, def)
		}
	}
}

func TestUnhealthyDeploymentRollsBack(t *testing.T) {
	h := schedulertest.New(t)
	h.Fleet()
	v1, v2 := h.TaskDefinition("ls", 1), h.TaskDefinition("ls", 2)
	s := schedulertest.Spec("ls", v1, 0, "", "role=logger")
	s.Deployment.AutoRollback = true
	if _, err := h.Ops.CreateEnvironment(h.Ctx, "default", s); err != nil {
		t.Fatal(err)
	}
	h.Deploy("ls", "")
	h.Settle("ls")
	if _, err := h.Ops.UpdateEnvironment(h.Ctx, "default", "ls", operations.Spec{TaskDefinition: v2}); err != nil {
		t.Fatal(err)
	}
	bad := h.Deploy("ls", "")
	h.Reconcile("ls") // min_healthy_percent 0: every old task is replaced
	h.StopsOnly()
	// The new task never starts on i1 (its agent does nothing with it).
	h.Settle("ls", "i1")
	if d := h.Deployment("ls", bad); d.GetStatus() != scheduler.StatusInProgress {
		t.Fatalf("deployment %s before the healthy deadline", d.GetStatus())
	}
	h.Clock.Advance(time.Minute)
	h.Reconcile("ls")
	if st := h.EnvStatus("ls"); st.GetHealth() != scheduler.HealthUnhealthy {
		t.Fatalf("environment health %s once the deployment failed, want unhealthy", st.GetHealth())
	}
	h.Settle("ls", "i1")
	d := h.Deployment("ls", bad)
	if d.GetStatus() != scheduler.StatusUnhealthy || !strings.Contains(d.GetStatusReason(), "was not healthy within 1m0s") {
		t.Fatalf("deployment %s (%s), want unhealthy: not healthy within 1m", d.GetStatus(), d.GetStatusReason())
	}
	latest := h.DeploymentsOf("ls")[0]
	if latest.GetRollbackOf() != bad || latest.GetVersionNumber() != 1 {
		t.Fatalf("latest deployment %v, want an auto rollback to version 1", latest)
	}
	h.Settle("ls")
	if latest := h.DeploymentsOf("ls")[0]; latest.GetStatus() != scheduler.StatusCompleted {
		t.Fatalf("the rollback ended %s (%s)", latest.GetStatus(), latest.GetStatusReason())
	}
	for inst, def := range h.Live() {
		if def != v1 {
			t.Fatalf("%s runs %s after the rollback", inst, def)
		}
	}
	if e, st := h.Env("ls"), h.EnvStatus("ls"); st.GetHealth() != scheduler.HealthHealthy || st.GetDesiredVersion() == e.GetLatestVersion() {
		t.Fatalf("environment health %s, desired %s latest %s", st.GetHealth(), st.GetDesiredVersion(), e.GetLatestVersion())
	}
	// A failure and a rollback are the scheduler's: the generation is the
	// user's create and update.
	if gen := h.EnvResource("ls").GetGeneration(); gen != 2 {
		t.Fatalf("generation %d after a failed deployment and its rollback, want 2", gen)
	}
	// The failed deployment names its rollback and the version it returns
	// to, so that whoever followed it is told; the environment names its
	// versions by number as well.
	if d := h.Deployment("ls", bad); d.GetRollbackDeployment() == "" || d.GetRollbackVersionNumber() != 1 {
		t.Fatalf("the failed deployment names rollback %q to version %d, want the auto rollback to version 1", d.GetRollbackDeployment(), d.GetRollbackVersionNumber())
	} else if rb := h.Deployment("ls", d.GetRollbackDeployment()); rb.GetRollbackOf() != bad {
		t.Fatalf("deployment %s is no rollback of %s: %v", d.GetRollbackDeployment(), bad, rb)
	}
	if e, st := h.Env("ls"), h.EnvStatus("ls"); st.GetDesiredVersionNumber() != 1 || st.GetLastCompletedVersionNumber() != 1 || st.GetDesiredTaskDefinition() != v1 || e.GetVersionCount() != 2 {
		t.Fatalf("environment after the rollback: desired %d (%s), last completed %d, latest %d; want desired 1 (%s), last completed 1, latest 2",
			st.GetDesiredVersionNumber(), st.GetDesiredTaskDefinition(), st.GetLastCompletedVersionNumber(), e.GetVersionCount(), v1)
	}
	// GetEnvironment answers with the desired version too: its spec is
	// what runs, where the environment's own is the latest version's.
	info, err := h.Ops.GetEnvironment(h.Ctx, "default", "ls")
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
	h := schedulertest.New(t)
	h.Fleet()
	s := schedulertest.Spec("ls", h.TaskDefinition("ls", 1), 0, "", "role=logger")
	s.Deployment.AutoRollback = true
	if _, err := h.Ops.CreateEnvironment(h.Ctx, "default", s); err != nil {
		t.Fatal(err)
	}
	id := h.Deploy("ls", "")
	h.Settle("ls", "i1")
	h.Clock.Advance(time.Minute)
	h.Settle("ls", "i1")
	d := h.Deployment("ls", id)
	if d.GetStatus() != scheduler.StatusUnhealthy || d.GetRollbackDeployment() != "" ||
		!strings.Contains(d.GetStatusReason(), "; auto_rollback: no version has completed a deployment, so there is none to roll back to") {
		t.Fatalf("deployment %s (%s), rollback %q; want unhealthy, no rollback, and why", d.GetStatus(), d.GetStatusReason(), d.GetRollbackDeployment())
	}
	if n := len(h.DeploymentsOf("ls")); n != 1 {
		t.Fatalf("%d deployments, want only the failed one", n)
	}
}

// A deployment made while no instance of the group is up completes, as
// the version is now the desired one, but says that it placed nothing and
// why; the version is placed on each instance as it comes back.
func TestDeploymentWithNoInstanceUpSaysNothingPlaced(t *testing.T) {
	h := schedulertest.New(t)
	h.Fleet()
	td := h.CreateLoggers("ls", 1)
	for _, n := range []string{"i1", "i2", "i3"} {
		h.SetInstanceStatus(n, orchestrator.InstanceDown)
	}
	id := h.Deploy("ls", "")
	h.Settle("ls")
	d := h.Deployment("ls", id)
	want := "nothing placed: no instance of the instance group (cluster default, role=logger) is ready (3 down: i1, i2, i3); the version is placed on each one that becomes ready"
	if d.GetStatus() != scheduler.StatusCompleted || d.GetTotal() != 0 || d.GetStatusReason() != want {
		t.Fatalf("deployment %s %d/%d (%s)\nwant completed 0/0 (%s)", d.GetStatus(), d.GetComplete(), d.GetTotal(), d.GetStatusReason(), want)
	}
	h.SetInstanceStatus("i2", orchestrator.InstanceReady)
	h.Settle("ls")
	if live := h.Live(); len(live) != 1 || live["i2"] != td {
		t.Fatalf("live tasks %v, want %s on i2, back up", live, td)
	}

	// A group nothing is in: the reason says so.
	if _, err := h.Ops.CreateEnvironment(h.Ctx, "default", schedulertest.Spec("gpu", h.TaskDefinition("gpu", 1), 75, "", "role=gpu")); err != nil {
		t.Fatal(err)
	}
	id = h.Deploy("gpu", "")
	h.Settle("gpu")
	if d := h.Deployment("gpu", id); d.GetStatus() != scheduler.StatusCompleted ||
		d.GetStatusReason() != "nothing placed: no instance is in the instance group (cluster default, role=gpu); the version is placed on each instance that joins it" {
		t.Fatalf("deployment %s (%s)", d.GetStatus(), d.GetStatusReason())
	}
}

func TestNewLeaderResumesWithoutPlacingTwice(t *testing.T) {
	h := schedulertest.New(t)
	for i := range 6 {
		h.Instance("n"+string(rune('a'+i)), map[string]string{})
	}
	v1, v2 := h.TaskDefinition("ls", 1), h.TaskDefinition("ls", 2)
	if _, err := h.Ops.CreateEnvironment(h.Ctx, "default", schedulertest.Spec("ls", v1, 50, "")); err != nil {
		t.Fatal(err)
	}
	h.Deploy("ls", "")
	h.Settle("ls")
	if _, err := h.Ops.UpdateEnvironment(h.Ctx, "default", "ls", operations.Spec{TaskDefinition: v2}); err != nil {
		t.Fatal(err)
	}
	id := h.Deploy("ls", "")
	h.Reconcile("ls") // the first batch of 3 is replaced
	h.Failover()
	// The old leader's last decision is applied once more by a new one
	// that read the same state: the placements are refused, not doubled.
	h.Reconcile("ls")
	h.Reconcile("ls")
	h.Live()
	placed := 0
	for _, task := range h.Tasks() {
		if task.GetTaskDefinition() == v2 {
			placed++
		}
	}
	if placed != 3 {
		t.Fatalf("%d tasks of %s after the failover, want the first batch of 3", placed, v2)
	}
	h.Settle("ls")
	if d := h.Deployment("ls", id); d.GetStatus() != scheduler.StatusCompleted || d.GetComplete() != 6 {
		t.Fatalf("deployment %s %d/%d", d.GetStatus(), d.GetComplete(), d.GetTotal())
	}
}

func TestDeleteStopsTasksThenRemoves(t *testing.T) {
	h := schedulertest.New(t)
	h.Fleet()
	td := h.TaskDefinition("ls", 1)
	if _, err := h.Ops.CreateEnvironment(h.Ctx, "default", schedulertest.Spec("ls", td, 75, "", "role=logger")); err != nil {
		t.Fatal(err)
	}
	id := h.Deploy("ls", "")
	h.Reconcile("ls")
	_, err := h.Ops.DeleteEnvironment(h.Ctx, "default", "ls")
	schedulertest.RequireCode(t, err, codes.FailedPrecondition, "in progress: stop it first")
	h.Settle("ls")
	if d := h.Deployment("ls", id); d.GetStatus() != scheduler.StatusCompleted {
		t.Fatalf("deployment %s", d.GetStatus())
	}
	if _, err := h.Ops.DeleteEnvironment(h.Ctx, "default", "ls"); err != nil {
		t.Fatal(err)
	}
	h.Reconcile("ls")
	for name, task := range h.Tasks() {
		if task.GetDesiredStatus() != orchestrator.StatusStopped {
			t.Fatalf("task %s still desired %s while its environment is deleted", name, task.GetDesiredStatus())
		}
	}
	h.Settle("ls")
	if _, err := h.Ops.GetEnvironment(h.Ctx, "default", "ls"); err == nil {
		t.Fatal("the environment is still there after its tasks stopped")
	}
	// Nothing of the scheduler's own (there was an environment guard per
	// namespace once) is left to keep the namespace from being deleted.
	left, err := h.API.List(h.Ctx, &pbresource.ListRequest{Type: scheduler.EnvironmentType, Tenancy: &pbresource.Tenancy{Namespace: "default"}, Consistent: true})
	if err != nil || len(left.GetResources()) != 0 {
		t.Fatalf("environments of the namespace after its last was deleted: %v, %v; want none", left.GetResources(), err)
	}
}

// TestSteadyStateWritesNothing: once converged, a reconcile (every
// resync, every unrelated change) reads and decides but writes nothing.
func TestSteadyStateWritesNothing(t *testing.T) {
	h := schedulertest.New(t)
	h.Fleet()
	td := h.TaskDefinition("ls", 1)
	if _, err := h.Ops.CreateEnvironment(h.Ctx, "default", schedulertest.Spec("ls", td, 75, "", "role=logger")); err != nil {
		t.Fatal(err)
	}
	h.Deploy("ls", "")
	h.Settle("ls")
	before := h.Fingerprint()
	if err := h.Ctl.Reconciler.Reconcile(h.Ctx, controller.Request{ID: scheduler.EnvironmentID("default", "ls")}); err != nil {
		t.Fatal(err)
	}
	if after := h.Fingerprint(); after != before {
		t.Fatalf("a converged reconcile wrote:\nbefore %s\nafter  %s", before, after)
	}
}

// TestInstanceDownThroughADeploymentIsBroughtUpToDate: an instance down
// for a whole rollout comes back with the old version, and gets the new
// one once it is back.
func TestInstanceDownThroughADeploymentIsBroughtUpToDate(t *testing.T) {
	h := schedulertest.New(t)
	h.Fleet()
	v1, v2 := h.TaskDefinition("ls", 1), h.TaskDefinition("ls", 2)
	if _, err := h.Ops.CreateEnvironment(h.Ctx, "default", schedulertest.Spec("ls", v1, 50, "", "role=logger")); err != nil {
		t.Fatal(err)
	}
	h.Deploy("ls", "")
	h.Settle("ls")
	h.SetInstanceStatus("i3", orchestrator.InstanceDown)
	if _, err := h.Ops.UpdateEnvironment(h.Ctx, "default", "ls", operations.Spec{TaskDefinition: v2}); err != nil {
		t.Fatal(err)
	}
	id := h.Deploy("ls", "")
	h.Settle("ls", "i3")
	if d := h.Deployment("ls", id); d.GetStatus() != scheduler.StatusCompleted || d.GetTotal() != 2 {
		t.Fatalf("deployment %s %d/%d, want completed over the 2 instances that are up", d.GetStatus(), d.GetComplete(), d.GetTotal())
	}
	if h.Live()["i3"] != v1 {
		t.Fatal("the task of down i3 was touched")
	}
	h.SetInstanceStatus("i3", orchestrator.InstanceReady)
	h.Settle("ls")
	for inst, def := range h.Live() {
		if def != v2 {
			t.Fatalf("%s runs %s once back, want %s", inst, def, v2)
		}
	}
}

// A task lost with its instance before it ever ran does not fail the
// deployment: it is placed again once the instance is back. One lost
// after it ran does.
func TestTaskLostBeforeItRanIsPlacedAgain(t *testing.T) {
	h := schedulertest.New(t)
	h.Fleet()
	td := h.CreateLoggers("ls", 1)
	id := h.Deploy("ls", "")
	h.Reconcile("ls")
	// i1 misses its heartbeats before its agent starts the task: the
	// servers mark it LOST; back, the agent has no record of it.
	lostBeforeRunning := func(instance string) {
		list, _ := h.API.List(h.Ctx, &pbresource.ListRequest{Type: orchestrator.TaskType, Tenancy: &pbresource.Tenancy{Namespace: "default"}})
		for _, r := range list.GetResources() {
			tk, _ := resource.DecodeData[*pborch.Task](r)
			if st := proto.Clone(orchestrator.TaskStatusOf(r)).(*pborch.TaskStatus); tk.GetInstance() == instance && st.GetLastStatus() != orchestrator.StatusStopped {
				st.LastStatus, st.StopReason = orchestrator.StatusStopped, orchestrator.LostReason(instance)
				h.Report(r, st)
				return
			}
		}
		h.T.Fatalf("no live task on %s", instance)
	}
	lostBeforeRunning("i1")
	h.Settle("ls")
	if d := h.Deployment("ls", id); d.GetStatus() != scheduler.StatusCompleted {
		t.Fatalf("deployment %s (%s), want completed with the lost task placed again", d.GetStatus(), d.GetStatusReason())
	}
	if h.Live()["i1"] != td {
		t.Fatalf("i1 runs %q, want %s", h.Live()["i1"], td)
	}

	// The same after the task ran: a failure of the deployment.
	if _, err := h.Ops.UpdateEnvironment(h.Ctx, "default", "ls", operations.Spec{TaskDefinition: h.TaskDefinition("ls", 2)}); err != nil {
		t.Fatal(err)
	}
	id = h.Deploy("ls", "")
	h.Reconcile("ls") // one of three is replaced
	h.Agents()
	for inst, def := range h.Live() {
		if def == h.TaskDefinition("ls", 2) {
			h.Kill(inst)
			break
		}
	}
	h.Settle("ls")
	if d := h.Deployment("ls", id); d.GetStatus() != scheduler.StatusUnhealthy {
		t.Fatalf("deployment %s, want unhealthy: a task it placed died after it ran", d.GetStatus())
	}
}

// TestFailedDeploymentIsNotCarriedOn: after a deployment fails, the
// scheduler does not go on replacing tasks with its version.
func TestFailedDeploymentIsNotCarriedOn(t *testing.T) {
	h := schedulertest.New(t)
	h.Fleet()
	v1, v2 := h.TaskDefinition("ls", 1), h.TaskDefinition("ls", 2)
	if _, err := h.Ops.CreateEnvironment(h.Ctx, "default", schedulertest.Spec("ls", v1, 60, "", "role=logger")); err != nil {
		t.Fatal(err)
	}
	h.Deploy("ls", "")
	h.Settle("ls")
	if _, err := h.Ops.UpdateEnvironment(h.Ctx, "default", "ls", operations.Spec{TaskDefinition: v2}); err != nil {
		t.Fatal(err)
	}
	id := h.Deploy("ls", "")
	h.Reconcile("ls") // one of three is replaced first
	h.StopsOnly()
	h.Settle("ls", "i1", "i2", "i3") // the new task never starts
	h.Clock.Advance(time.Minute)
	h.Settle("ls", "i1", "i2", "i3")
	if d := h.Deployment("ls", id); d.GetStatus() != scheduler.StatusUnhealthy {
		t.Fatalf("deployment %s, want unhealthy", d.GetStatus())
	}
	h.Settle("ls")
	n := 0
	for _, def := range h.Live() {
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
	h := schedulertest.New(t)
	h.Fleet()
	td := h.TaskDefinition("ls", 1)
	if _, err := h.Ops.CreateEnvironment(h.Ctx, "default", schedulertest.Spec("ls", td, 75, "", "role=logger")); err != nil {
		t.Fatal(err)
	}
	h.Deploy("ls", "")
	h.Settle("ls")

	// While another server leads, the task on i2 dies: this server's
	// watches are closed and do not see it.
	list, err := h.API.List(h.Ctx, &pbresource.ListRequest{Type: orchestrator.TaskType, Tenancy: &pbresource.Tenancy{Namespace: "default"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range list.GetResources() {
		task, _ := resource.DecodeData[*pborch.Task](r)
		if task.GetInstance() == "i2" {
			payload, _ := anypb.New(&pborch.TaskStatus{LastStatus: orchestrator.StatusStopped})
			if _, err := h.API.WriteStatus(resource.AsAgent(h.Ctx, "i2"), &pbresource.WriteStatusRequest{Id: r.GetId(), Version: r.GetVersion(), Key: orchestrator.TaskStatusKey,
				Status: &pbresource.Status{Data: payload}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	h.NewTerm() // leading again
	h.Reconcile("ls")
	if _, ok := h.Live()["i2"]; !ok {
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
	h := schedulertest.New(t)
	const n = 2300 // three write batches: 1,000, 1,000 and 300 with the progress
	for i := range n {
		h.Instance(fmt.Sprintf("i%d", i), map[string]string{"role": "logger"})
	}
	td := h.TaskDefinition("ls", 1)
	if _, err := h.Ops.CreateEnvironment(h.Ctx, "default", schedulertest.Spec("ls", td, 75, "", "role=logger")); err != nil {
		t.Fatal(err)
	}
	id := h.Deploy("ls", "")
	h.Reconcile("ls")
	if got := h.Live(); len(got) != n {
		t.Fatalf("%d live tasks after one deployment run, want %d", len(got), n)
	}
	if d := h.Deployment("ls", id); d.GetStatus() != scheduler.StatusInProgress || d.GetTotal() != n {
		t.Fatalf("deployment %s %d/%d, want in-progress of %d", d.GetStatus(), d.GetComplete(), d.GetTotal(), n)
	}
	h.Settle("ls")
	if d := h.Deployment("ls", id); d.GetStatus() != scheduler.StatusCompleted || d.GetComplete() != n {
		t.Fatalf("deployment %s %d/%d, want completed %d/%d", d.GetStatus(), d.GetComplete(), d.GetTotal(), n, n)
	}
}

// TestGenerationMovesOnlyWithTheSpec: the scheduler reports through the
// environment's status, so starting, completing, failing and stopping
// deployments never move its generation; a user's update does, once, and
// the status says which generation the scheduler last acted on.
func TestGenerationMovesOnlyWithTheSpec(t *testing.T) {
	h := schedulertest.New(t)
	h.Fleet()
	v1 := h.CreateLoggers("ls", 1)
	v2 := h.TaskDefinition("ls", 2)
	check := func(when string, gen uint64, status, health string) {
		t.Helper()
		res := h.EnvResource("ls")
		st := h.EnvStatus("ls")
		observed := res.GetStatus()[scheduler.StatusKey].GetObservedGeneration()
		if res.GetGeneration() != gen || observed != gen || st.GetStatus() != status || st.GetHealth() != health {
			t.Fatalf("%s: generation %d, observed %d, %s and %s; want generation %d observed, %s and %s",
				when, res.GetGeneration(), observed, st.GetStatus(), st.GetHealth(), gen, status, health)
		}
	}
	h.Reconcile("ls")
	check("created", 1, scheduler.EnvInactive, scheduler.HealthHealthy)

	h.Deploy("ls", "")
	h.Reconcile("ls")
	check("deploying", 1, scheduler.EnvActive, scheduler.HealthHealthy)
	h.Settle("ls")
	check("deployed", 1, scheduler.EnvActive, scheduler.HealthHealthy)
	if st := h.EnvStatus("ls"); st.GetLastCompletedVersionNumber() != 1 || st.GetDesiredTaskDefinition() != v1 {
		t.Fatalf("status after the first deployment: %v", st)
	}

	if _, err := h.Ops.UpdateEnvironment(h.Ctx, "default", "ls", operations.Spec{TaskDefinition: v2}); err != nil {
		t.Fatal(err)
	}
	if gen := h.EnvResource("ls").GetGeneration(); gen != 2 {
		t.Fatalf("an update left the generation at %d, want 2", gen)
	}
	h.Reconcile("ls")
	check("updated", 2, scheduler.EnvActive, scheduler.HealthHealthy)

	// A deployment that is stopped: the status moves, the generation does
	// not (TestUnhealthyDeploymentRollsBack checks a failed one).
	id := h.Deploy("ls", "")
	h.Reconcile("ls")
	if _, err := h.Ops.StopDeployment(h.Ctx, "default", "ls", id); err != nil {
		t.Fatal(err)
	}
	h.Reconcile("ls")
	check("stopped", 2, scheduler.EnvInactive, scheduler.HealthHealthy)
	if st := h.EnvStatus("ls"); st.GetActiveDeployment() != "" || st.GetDesiredTaskDefinition() != v2 {
		t.Fatalf("status after the stop: %v", st)
	}
}

// TestStatusIsRepairedFromTheDeployments: a run that started a deployment
// but ended before reporting it (a crash, a lost leadership) leaves a
// deployment in progress that the status does not name; the next run
// adopts it instead of cancelling it. Started as the scheduler reports it
// now (its progress in its status) and as a store written by the version
// before kept it (its progress in its data), which the scheduler resumes.
func TestStatusIsRepairedFromTheDeployments(t *testing.T) {
	for _, old := range []bool{false, true} {
		t.Run(map[bool]string{false: "progress in the status", true: "progress in the data"}[old], func(t *testing.T) {
			h := schedulertest.New(t)
			h.Fleet()
			h.CreateLoggers("ls", 1)
			h.Reconcile("ls")
			id := h.Deploy("ls", "")
			// What promote writes, without the status write that follows it.
			dep := h.Deployment("ls", id)
			dep.Status = scheduler.StatusInProgress
			dep.StartTime, dep.LastProgressAt = timestamppb.New(h.Clock.Now()), timestamppb.New(h.Clock.Now())
			res, err := h.API.Read(h.Ctx, &pbresource.ReadRequest{Id: scheduler.DeploymentID("default", id)})
			if err != nil {
				t.Fatal(err)
			}
			if old {
				h.Write(res.GetResource().GetId(), res.GetResource().GetOwner(), dep, res.GetResource().GetVersion())
			} else {
				reportProgress(t, h, res.GetResource(), dep)
			}
			if st := h.EnvStatus("ls"); st.GetActiveDeployment() != "" {
				t.Fatalf("status %v names a deployment before any run reported it", st)
			}
			h.Failover()
			h.Settle("ls")
			if d := h.Deployment("ls", id); d.GetStatus() != scheduler.StatusCompleted {
				t.Fatalf("the deployment ended %s (%s), want completed", d.GetStatus(), d.GetStatusReason())
			}
			if st := h.EnvStatus("ls"); st.GetStatus() != scheduler.EnvActive || st.GetLastCompletedVersionNumber() != 1 {
				t.Fatalf("status %v, want active with version 1 completed", st)
			}
			// Its end is in its status, whichever way it started.
			res, err = h.API.Read(h.Ctx, &pbresource.ReadRequest{Id: scheduler.DeploymentID("default", id)})
			if err != nil {
				t.Fatal(err)
			}
			if pr := progressOf(t, res.GetResource()); pr.GetStatus() != scheduler.StatusCompleted {
				t.Fatalf("status[%s] %v, want completed", scheduler.StatusKey, pr)
			}
		})
	}
}

// TestDeploymentRunsAgainAtItsDeadline: while the tasks a deployment
// placed are not healthy, the reconciler asks to run again when their
// healthy_deadline passes, and that run fails the deployment, without
// waiting for another change or the resync.
func TestDeploymentRunsAgainAtItsDeadline(t *testing.T) {
	h := schedulertest.New(t)
	h.Fleet()
	h.CreateLoggers("ls", 1)
	id := h.Deploy("ls", "")
	h.Reconcile("ls") // places on the three loggers; no agent starts them
	if h.Requeue <= 0 || h.Requeue > time.Minute {
		t.Fatalf("with its tasks pending, the reconciler asked to run again after %v, want by their healthy_deadline (1m)", h.Requeue)
	}
	h.Clock.Advance(h.Requeue)
	h.Reconcile("ls")
	if d := h.Deployment("ls", id); d.GetStatus() != scheduler.StatusUnhealthy {
		t.Fatalf("deployment %s after its healthy_deadline, want %s", d.GetStatus(), scheduler.StatusUnhealthy)
	}
}
