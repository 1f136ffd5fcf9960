package controllers_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/orchestrator/controllers"
	"trellis.dev/trellis/internal/orchestrator/heartbeat"
)

// A ready instance is checked again at its deadline, which heartbeats
// push back; silence for a TTL marks it down, and the task controller then
// marks its live tasks lost.
func TestSilentInstanceGoesDownAndItsTasksLost(t *testing.T) {
	e := newEnv(t)
	e.setLeader(true)
	e.register("i-1", "s1", true) // draining: the drain must survive
	e.register("i-2", "s1", false)
	e.place("t-running", "i-1", "RUNNING")
	e.place("t-pending", "i-1", "PENDING")
	e.place("t-stopped", "i-1", "STOPPED")
	e.place("t-elsewhere", "i-2", "RUNNING")

	if d := e.requeuedAfter(e.reconcileInstance("i-1")); d != testTTL {
		t.Fatalf("first verdict requeues after %s, want the TTL %s", d, testTTL)
	}
	e.clock.Advance(6 * time.Second)
	if err := e.tracker.Heartbeat(e.ctx, "i-1", "s1"); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(4 * time.Second)
	// At the first deadline: alive, since heard 4s ago.
	if d := e.requeuedAfter(e.reconcileInstance("i-1")); d != 6*time.Second {
		t.Fatalf("verdict after a heartbeat requeues after %s, want 6s", d)
	}
	if got := e.instance("i-1").GetStatus(); got != "draining" {
		t.Fatalf("status while alive = %q", got)
	}
	// Nothing to lose while the instance lives.
	if err := e.reconcileTasks("i-1"); err != nil {
		t.Fatal(err)
	}
	if got := e.task("t-running").GetLastStatus(); got != "RUNNING" {
		t.Fatalf("task on a live instance = %q, want RUNNING", got)
	}

	before, err := e.api.Read(e.ctx, &pbresource.ReadRequest{Id: orchestrator.InstanceID("i-1")})
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(6 * time.Second)
	if err := e.reconcileInstance("i-1"); err != nil {
		t.Fatalf("reconcile at the deadline = %v", err)
	}
	// The verdict is the controller's status key: the data, the agent's
	// and the operator's, is as it was, and its generation with it.
	after, err := e.api.Read(e.ctx, &pbresource.ReadRequest{Id: orchestrator.InstanceID("i-1")})
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(after.GetResource().GetData(), before.GetResource().GetData()) || after.GetResource().GetGeneration() != before.GetResource().GetGeneration() {
		t.Fatalf("marking down changed the data (generation %d, was %d)", after.GetResource().GetGeneration(), before.GetResource().GetGeneration())
	}
	in := e.instance("i-1")
	if in.GetStatus() != "down" || !in.GetDrain() || !in.GetDownSince().AsTime().Equal(e.clock.Now()) ||
		in.GetSession() != "s1" || in.GetAttributes()["zone"] != "a" {
		t.Fatalf("instance after expiry = %v; want down since now, drain and the rest kept", in)
	}
	// A heartbeat does not bring it back.
	if err := e.tracker.Heartbeat(e.ctx, "i-1", "s1"); heartbeat.ReasonOf(err) != heartbeat.ReasonDown {
		t.Fatalf("Heartbeat of a down instance = %v, want %s", err, heartbeat.ReasonDown)
	}
	// Reconciling a down instance again changes nothing.
	if err := e.reconcileInstance("i-1"); err != nil {
		t.Fatal(err)
	}

	if err := e.reconcileTasks("i-1"); err != nil {
		t.Fatal(err)
	}
	want := "instance i-1 down: no heartbeat for 10s"
	for _, name := range []string{"t-running", "t-pending"} {
		tk := e.task(name)
		if tk.GetLastStatus() != "LOST" || tk.GetStopReason() != want || !tk.GetStoppedAt().AsTime().Equal(e.clock.Now()) {
			t.Fatalf("%s = %v; want LOST, %q, stopped now", name, tk, want)
		}
	}
	if got := e.task("t-stopped"); got.GetLastStatus() != "STOPPED" || got.GetStopReason() != "" {
		t.Fatalf("an ended task was changed: %v", got)
	}
	if got := e.task("t-elsewhere").GetLastStatus(); got != "RUNNING" {
		t.Fatalf("a task on another instance = %q", got)
	}
	// Idempotent.
	if err := e.reconcileTasks("i-1"); err != nil {
		t.Fatal(err)
	}
}

// The agent registers again: the instance is alive with a whole TTL, and
// its lost tasks stay lost.
func TestReRegisteredInstanceComesBack(t *testing.T) {
	e := newEnv(t)
	e.setLeader(true)
	e.register("i-1", "s1", false)
	e.place("t1", "i-1", "RUNNING")
	e.reconcileInstance("i-1")
	e.clock.Advance(testTTL)
	if err := e.reconcileInstance("i-1"); err != nil {
		t.Fatal(err)
	}
	if err := e.reconcileTasks("i-1"); err != nil {
		t.Fatal(err)
	}

	e.register("i-1", "s2", false)
	if got := e.instance("i-1"); got.GetStatus() != "ready" || got.GetDownSince() == nil {
		t.Fatalf("re-registered instance = %v; want ready, down_since kept", got)
	}
	if err := e.tracker.Heartbeat(e.ctx, "i-1", "s2"); err != nil {
		t.Fatalf("Heartbeat of the new session = %v", err)
	}
	if d := e.requeuedAfter(e.reconcileInstance("i-1")); d != testTTL {
		t.Fatalf("verdict after re-registration requeues after %s, want a whole TTL", d)
	}
	if err := e.reconcileTasks("i-1"); err != nil {
		t.Fatal(err)
	}
	if got := e.task("t1").GetLastStatus(); got != "LOST" {
		t.Fatalf("lost task after the instance came back = %q, want LOST", got)
	}
}

// An Instance written after the verdict (the agent registered again with
// the same session, or an operator drained it) is judged anew: the write
// that would have marked the old version down must not land on the new one.
func TestInstanceWrittenAfterTheVerdictIsNotMarkedDown(t *testing.T) {
	e := newEnv(t)
	e.setLeader(true)
	e.register("i-1", "s1", false)
	e.reconcileInstance("i-1")
	e.clock.Advance(testTTL)
	// The verdict: expired (as a reconcile would ask, before its write).
	res, err := e.api.Read(e.ctx, readInstance("i-1"))
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := e.tracker.Observe("i-1", "s1", res.GetResource().GetVersion()); !l.Expired {
		t.Fatal("not expired after a TTL")
	}
	e.writeInstance("i-1", func(in *pborch.Instance) { in.Drain, in.Status = true, "" })
	if d := e.requeuedAfter(e.reconcileInstance("i-1")); d != testTTL {
		t.Fatalf("verdict on the new version requeues after %s, want a whole TTL", d)
	}
	if got := e.instance("i-1").GetStatus(); got != "draining" {
		t.Fatalf("status = %q, want draining", got)
	}
}

// Live tasks of instances that left or are gone are lost; ended ones kept.
func TestTasksOfLeftAndRemovedInstances(t *testing.T) {
	e := newEnv(t)
	e.setLeader(true)
	e.register("left-1", "s1", false)
	e.writeInstance("left-1", func(in *pborch.Instance) { in.Status = "left" })
	e.place("on-left", "left-1", "RUNNING")
	e.place("ended-on-left", "left-1", "STOPPED")
	e.place("on-gone", "gone-1", "PENDING")
	for _, name := range []string{"left-1", "gone-1"} {
		if err := e.reconcileTasks(name); err != nil {
			t.Fatal(err)
		}
	}
	for name, reason := range map[string]string{
		"on-left": "instance left-1 left the cluster",
		"on-gone": "instance gone-1 was removed",
	} {
		if tk := e.task(name); tk.GetLastStatus() != "LOST" || tk.GetStopReason() != reason {
			t.Errorf("%s = %v; want LOST, %q", name, tk, reason)
		}
	}
	if got := e.task("ended-on-left").GetLastStatus(); got != "STOPPED" {
		t.Errorf("ended task on a left instance = %q, want STOPPED", got)
	}
	// The instance controller forgets what is not alive.
	if err := e.reconcileInstance("left-1"); err != nil {
		t.Fatal(err)
	}
	if err := e.reconcileInstance("gone-1"); err != nil {
		t.Fatal(err)
	}
}

// A task deleted while its deletion is not in the cache yet is skipped
// when read, without failing the reconcile.
func TestDeletedTaskIsDroppedFromTheIndex(t *testing.T) {
	e := newEnv(t)
	e.setLeader(true)
	e.place("t1", "gone-1", "RUNNING")
	e.place("t2", "gone-1", "RUNNING")
	if _, err := e.api.Delete(e.ctx, deleteTask("t1")); err != nil {
		t.Fatal(err)
	}
	if err := e.reconcileTasks("gone-1"); err != nil {
		t.Fatal(err)
	}
	if got := e.task("t2").GetLastStatus(); got != "LOST" {
		t.Fatalf("t2 = %q, want LOST", got)
	}
}

// The controllers may start a moment before the tracker follows the same
// leadership: the verdict is asked again shortly.
func TestVerdictWaitsForTheTracker(t *testing.T) {
	e := newEnv(t)
	e.register("i-1", "s1", false)
	if d := e.requeuedAfter(e.reconcileInstance("i-1")); d <= 0 || d > time.Second {
		t.Fatalf("verdict before the tracker is active requeues after %s, want a short while", d)
	}
	if got := e.instance("i-1").GetStatus(); got != "ready" {
		t.Fatalf("status = %q", got)
	}
}

// A verdict at an instance's own deadline asks the tracker alone while the
// Instance is unchanged since the last full verdict: a leader with 5,000
// instances would otherwise read and decode 500 Instances a second for
// nothing. A change to the Instance, or an expired deadline, reads it.
func TestDeadlineVerdictsAskTheTrackerAlone(t *testing.T) {
	e := newEnv(t)
	e.setLeader(true)
	e.register("i-1", "s1", false)
	if d := e.requeuedAfter(e.reconcileInstance("i-1")); d != testTTL {
		t.Fatalf("first verdict requeues after %s, want %s", d, testTTL)
	}
	if got := e.reads.instanceReads(); got != 1 {
		t.Fatalf("first verdict read the Instance %d times, want 1", got)
	}
	for range 3 {
		e.clock.Advance(testTTL / 2)
		if err := e.tracker.Heartbeat(e.ctx, "i-1", "s1"); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(testTTL / 2)
		if d := e.requeuedAfter(e.reconcileInstance("i-1")); d != testTTL/2 {
			t.Fatalf("verdict at the deadline requeues after %s, want %s", d, testTTL/2)
		}
	}
	if got := e.reads.instanceReads(); got != 1 {
		t.Fatalf("verdicts at deadlines read the Instance %d times in all, want only the first", got)
	}

	// An operator drains it: the new version is read and judged.
	e.writeInstance("i-1", func(in *pborch.Instance) { in.Drain, in.Status = true, "" })
	if d := e.requeuedAfter(e.reconcileInstance("i-1")); d != testTTL/2 {
		t.Fatalf("verdict after a change requeues after %s, want %s", d, testTTL/2)
	}
	if got := e.reads.instanceReads(); got != 2 {
		t.Fatalf("a changed Instance was read %d times in all, want 2", got)
	}

	// Silence: the expired verdict reads the store and writes it down.
	e.clock.Advance(testTTL)
	if err := e.reconcileInstance("i-1"); err != nil {
		t.Fatalf("reconcile at the deadline = %v", err)
	}
	if got := e.instance("i-1").GetStatus(); got != "down" {
		t.Fatalf("status after a silent TTL = %q, want down", got)
	}
}

// The task controller's mapper is a pure function of the event and the
// cache: a live task asks for a verdict on its instance only when the
// cache has that instance not ready nor draining. A task placed on a live
// instance, and every report of it, asks for nothing: the verdict on a
// live instance is that its agent reports its tasks, and when it goes
// down its own change asks. A task that ended never asks.
func TestTaskReportsDoNotAskForTheirInstanceAgain(t *testing.T) {
	e := newEnv(t)
	e.setLeader(true)
	e.register("i-1", "s1", false)
	write := func(name, instance, status string) *pbresource.Resource {
		id := orchestrator.TaskID("default", name)
		res := &pbresource.Resource{Id: id}
		if cur, err := e.api.Read(e.ctx, &pbresource.ReadRequest{Id: id}); err == nil {
			res = cur.GetResource()
		}
		return e.writeTask(res, instance, status)
	}
	mapped := func(name, instance, status string) int {
		return len(e.watched(e.tasks, controller.Event{Resource: write(name, instance, status)}))
	}
	if n := mapped("t1", "i-1", "PENDING"); n != 0 {
		t.Fatalf("a task placed on a ready instance asks for %d verdicts, want none", n)
	}
	if n := mapped("t1", "i-1", "RUNNING"); n != 0 {
		t.Fatalf("a report of a task on a ready instance asks for %d verdicts, want none", n)
	}
	e.register("i-1", "s1", true)
	if n := mapped("t1", "i-1", "RUNNING"); n != 0 {
		t.Fatalf("a report of a task on a draining instance asks for %d verdicts, want none", n)
	}
	e.writeInstance("i-1", func(in *pborch.Instance) { in.Status = orchestrator.InstanceDown })
	if n := mapped("t1", "i-1", "RUNNING"); n != 1 {
		t.Fatalf("a live task on a down instance asks for %d verdicts, want 1", n)
	}
	if n := mapped("t1", "i-1", "STOPPED"); n != 0 {
		t.Fatalf("a task that ended asks for %d verdicts, want none", n)
	}
	// Deleted and created again under the same name, on an instance never
	// registered: another task, which asks.
	if _, err := e.api.Delete(e.ctx, deleteTask("t1")); err != nil {
		t.Fatal(err)
	}
	if reqs := e.watched(e.tasks, controller.Event{Resource: &pbresource.Resource{Id: orchestrator.TaskID("default", "t1")}, Deleted: true}); len(reqs) != 0 {
		t.Fatalf("a deletion asks for %d verdicts, want none", len(reqs))
	}
	if n := mapped("t1", "i-2", "PENDING"); n != 1 {
		t.Fatalf("a task on an unknown instance asks for %d verdicts, want 1", n)
	}
	// A resync maps what it listed from the store, which the cache may not
	// have taken yet: the mapper decodes it itself.
	ahead := write("t2", "i-1", "RUNNING")
	if reqs := e.tasks.Watches[0].Map(controller.Event{Resource: ahead}, controller.CacheLookup(e.cache)); len(reqs) != 1 || reqs[0].ID.GetName() != "i-1" {
		t.Fatalf("a resync's live task on a down instance asks for %v, want i-1", reqs)
	}
}

// A new term forgets what the last one judged: the first verdict on each
// instance reads it again.
func TestNewTermReadsInstancesAgain(t *testing.T) {
	e := newEnv(t)
	e.setLeader(true)
	e.register("i-1", "s1", false)
	e.requeuedAfter(e.reconcileInstance("i-1"))
	e.requeuedAfter(e.reconcileInstance("i-1"))
	if got := e.reads.instanceReads(); got != 1 {
		t.Fatalf("reads in the first term = %d, want 1", got)
	}
	e.instances.OnStart()
	e.requeuedAfter(e.reconcileInstance("i-1"))
	if got := e.reads.instanceReads(); got != 2 {
		t.Fatalf("reads after a new term = %d, want 2", got)
	}
}

// Under the Manager, whose watches feed the cache: tasks placed on a
// ready instance (which ask for no verdict) are lost when the instance
// goes down, and a task placed on it once it is down is lost too.
func TestTaskControllerUnderTheManager(t *testing.T) {
	e := newEnv(t)
	e.setLeader(true)
	lead := make(leadership, 1)
	mgr, err := controller.NewManager(controller.Config{Client: e.api, Leadership: lead, Cache: controller.NewCache(controller.CheckReadOnly())})
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := controllers.TaskController(controllers.Config{API: e.api, Tracker: e.tracker, Cache: mgr.Cache()})
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.Register(tasks); err != nil {
		t.Fatal(err)
	}
	e.register("i-1", "s1", false)
	e.place("before", "i-1", "RUNNING")
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		if err := mgr.Cache().Verify(); err != nil {
			t.Error(err)
		}
	})
	lead <- true
	waitFor(t, "the cache to list the tasks", func() bool { return len(mgr.Cache().List(orchestrator.TaskType)) == 1 })
	e.place("after", "i-1", "PENDING")
	waitFor(t, "the cache to hold the second task", func() bool { return len(mgr.Cache().List(orchestrator.TaskType)) == 2 })
	if got := e.task("after").GetLastStatus(); got != "PENDING" {
		t.Fatalf("a task on a ready instance = %q, want PENDING", got)
	}

	e.writeInstance("i-1", func(in *pborch.Instance) { in.Status = orchestrator.InstanceDown })
	for _, name := range []string{"before", "after"} {
		waitFor(t, name+" lost", func() bool { return e.task(name).GetLastStatus() == orchestrator.StatusLost })
	}
	e.place("late", "i-1", "PENDING")
	waitFor(t, "late lost", func() bool { return e.task("late").GetLastStatus() == orchestrator.StatusLost })
}

// waitFor waits until cond holds, failing the test after 10 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
