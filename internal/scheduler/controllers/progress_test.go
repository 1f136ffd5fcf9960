package controllers_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pbresource "trellis.dev/trellis/api/resource/v1"
	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/scheduler"
	"trellis.dev/trellis/internal/scheduler/controllers"
	"trellis.dev/trellis/internal/scheduler/operations"
	"trellis.dev/trellis/internal/scheduler/schedulertest"
)

// asController is ctx as the scheduler's controller writes: the owner of
// status["daemon-scheduler"].
func asController(ctx context.Context) context.Context {
	return resource.AsController(resource.FromOperations(ctx), controllers.ControllerName)
}

// reportProgress writes next's progress as the controller reports it for
// the deployment read as res (a CAS on its version), and fails the test
// when it is refused.
func reportProgress(t *testing.T, h *schedulertest.Harness, res *pbresource.Resource, next *pbscheduler.Deployment) *pbresource.Resource {
	t.Helper()
	out, err := writeProgress(h, res, next)
	if err != nil {
		t.Fatalf("reporting the progress of %s: %v", res.GetId().GetName(), err)
	}
	return out
}

func writeProgress(h *schedulertest.Harness, res *pbresource.Resource, next *pbscheduler.Deployment) (*pbresource.Resource, error) {
	req, err := scheduler.ReportProgress(res, next)
	if err != nil {
		return nil, err
	}
	out, err := h.API.WriteStatus(asController(h.Ctx), req)
	return out.GetResource(), err
}

// progressOf is what status["daemon-scheduler"] of a stored deployment
// holds, nil when nothing.
func progressOf(t *testing.T, res *pbresource.Resource) *pbscheduler.DeploymentProgress {
	t.Helper()
	data := res.GetStatus()[scheduler.StatusKey].GetData()
	if data == nil {
		return nil
	}
	pr := &pbscheduler.DeploymentProgress{}
	if err := data.UnmarshalTo(pr); err != nil {
		t.Fatal(err)
	}
	return pr
}

func readDeployment(t *testing.T, h *schedulertest.Harness, id string) *pbresource.Resource {
	t.Helper()
	out, err := h.API.Read(h.Ctx, &pbresource.ReadRequest{Id: scheduler.DeploymentID("default", id)})
	if err != nil {
		t.Fatal(err)
	}
	return out.GetResource()
}

// requestOf is the stored request of a deployment: its data.
func requestOf(t *testing.T, res *pbresource.Resource) *pbscheduler.Deployment {
	t.Helper()
	d, err := resource.DecodeData[*pbscheduler.Deployment](res)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// startDeployment deploys the latest version of ls and runs the scheduler
// once: the deployment is in progress, its tasks placed and not started.
func startDeployment(t *testing.T, h *schedulertest.Harness) string {
	t.Helper()
	id := h.Deploy("ls", "")
	h.Reconcile("ls")
	if d := h.Deployment("ls", id); d.GetStatus() != scheduler.StatusInProgress {
		t.Fatalf("deployment %s after a run, want in progress", d.GetStatus())
	}
	return id
}

// racingAPI runs before, once, ahead of the next Write: a write of
// someone else landing between an operation's read and its write.
type racingAPI struct {
	resource.API
	before func()
}

func (a *racingAPI) Write(ctx context.Context, req *pbresource.WriteRequest) (*pbresource.WriteResponse, error) {
	if f := a.before; f != nil {
		a.before = nil
		f()
	}
	return a.API.Write(ctx, req)
}

// TestStopAndProgressNeverOverwriteEachOther: a user's stop is the
// deployment's data, the scheduler's progress its status. Each is a
// compare-and-swap on the version its writer read, so whichever read
// before the other wrote is refused instead of writing over it: the
// controller's report from before a stop is refused (the next run sees the
// stop), and a stop read before a report is made again by the operation
// on what is stored, keeping the report. Neither is ever lost.
func TestStopAndProgressNeverOverwriteEachOther(t *testing.T) {
	h := schedulertest.New(t)
	h.Fleet()
	h.CreateLoggers("ls", 1)

	// The controller read the deployment, then the user stopped it.
	id := startDeployment(t, h)
	read := readDeployment(t, h, id)
	if _, err := h.Ops.StopDeployment(h.Ctx, "default", "ls", id); err != nil {
		t.Fatal(err)
	}
	next := proto.Clone(scheduler.DeploymentOf(read, requestOf(t, read))).(*pbscheduler.Deployment)
	next.Complete = 1
	if _, err := writeProgress(h, read, next); status.Code(err) != codes.Aborted {
		t.Fatalf("the controller's report over a stop it did not read: %v, want Aborted", err)
	}
	stored := readDeployment(t, h, id)
	if stop := requestOf(t, stored).GetStop(); stop.GetBy() != scheduler.StopByUser || stop.GetReason() != "stopped by a user" {
		t.Fatalf("the stop stored: %v", stop)
	}
	if !proto.Equal(stored.GetStatus()[scheduler.StatusKey], read.GetStatus()[scheduler.StatusKey]) {
		t.Fatalf("the refused report changed the progress: %v", stored.GetStatus()[scheduler.StatusKey])
	}
	if d := h.Deployment("ls", id); d.GetStatus() != scheduler.StatusStopped || d.GetStatusReason() != "stopped by a user" || d.GetComplete() != 0 {
		t.Fatalf("the deployment as read: %s (%s) %d complete, want stopped by a user, 0 complete", d.GetStatus(), d.GetStatusReason(), d.GetComplete())
	}
	h.Reconcile("ls")
	if st := h.EnvStatus("ls"); st.GetStatus() != scheduler.EnvInactive {
		t.Fatalf("the environment after its deployment stopped: %v", st)
	}

	// The user's stop read the deployment, then the controller reported.
	id = startDeployment(t, h)
	read = readDeployment(t, h, id)
	stale, err := scheduler.WithDeployment(read, func(x *pbscheduler.Deployment) {
		x.Stop = &pbscheduler.DeploymentStop{At: next.GetCreatedAt(), By: scheduler.StopByUser, Reason: "stopped by a user"}
	})
	if err != nil {
		t.Fatal(err)
	}
	next = proto.Clone(scheduler.DeploymentOf(read, requestOf(t, read))).(*pbscheduler.Deployment)
	next.Complete = 1
	reportProgress(t, h, read, next)
	if _, err := h.API.Write(resource.FromOperations(h.Ctx), &pbresource.WriteRequest{Resource: stale}); status.Code(err) != codes.Aborted {
		t.Fatalf("a stop over a report it did not read: %v, want Aborted", err)
	}
	// The operation reads again and stops it, keeping the report.
	racing := &racingAPI{API: h.API, before: func() {
		cur := readDeployment(t, h, id)
		next := proto.Clone(scheduler.DeploymentOf(cur, requestOf(t, cur))).(*pbscheduler.Deployment)
		next.Complete = 2
		reportProgress(t, h, cur, next)
	}}
	ops := *h.Ops
	ops.API = racing
	out, err := ops.StopDeployment(h.Ctx, "default", "ls", id)
	if err != nil {
		t.Fatalf("a stop while the scheduler reports: %v", err)
	}
	if racing.before != nil {
		t.Fatal("no report raced the stop")
	}
	stored = readDeployment(t, h, id)
	if pr := progressOf(t, stored); pr.GetComplete() != 2 || pr.GetStatus() != scheduler.StatusInProgress {
		t.Fatalf("the progress after the stop: %v, want the report that raced it", pr)
	}
	if requestOf(t, stored).GetStop() == nil {
		t.Fatal("the stop was not stored")
	}
	shown, err := resource.DecodeData[*pbscheduler.Deployment](out)
	if err != nil {
		t.Fatal(err)
	}
	if shown.GetStatus() != scheduler.StatusStopped || shown.GetComplete() != 2 {
		t.Fatalf("the stop answered %s with %d complete, want stopped with the 2 reported", shown.GetStatus(), shown.GetComplete())
	}
}

// TestStopRacingProgressKeepsBoth runs a user's stop and the controller's
// reports at once, the reporter retrying as its next run would (reading
// again, and reporting nothing on a deployment that ended): however they
// interleave, the stop is stored and wins, the reports that were stored
// are kept, and only the stop moved the generation.
func TestStopRacingProgressKeepsBoth(t *testing.T) {
	h := schedulertest.New(t)
	h.Fleet()
	h.CreateLoggers("ls", 1)
	for round := range 10 {
		id := startDeployment(t, h)
		var wg sync.WaitGroup
		var stopErr error
		reported := int32(0)
		wg.Go(func() { _, stopErr = h.Ops.StopDeployment(h.Ctx, "default", "ls", id) })
		wg.Go(func() {
			for n := int32(1); n <= 3; n++ {
				for {
					res, err := h.API.Read(h.Ctx, &pbresource.ReadRequest{Id: scheduler.DeploymentID("default", id)})
					if err != nil {
						t.Error(err)
						return
					}
					d, err := scheduler.DecodeDeployment(res.GetResource())
					if err != nil {
						t.Error(err)
						return
					}
					if scheduler.DeploymentDone(d.GetStatus()) {
						return
					}
					next := proto.Clone(d).(*pbscheduler.Deployment)
					next.Complete = n
					if _, err := writeProgress(h, res.GetResource(), next); status.Code(err) == codes.Aborted {
						continue
					} else if err != nil {
						t.Error(err)
						return
					}
					reported = n
					break
				}
			}
		})
		wg.Wait()
		if stopErr != nil {
			t.Fatalf("round %d: the stop: %v", round, stopErr)
		}
		stored := readDeployment(t, h, id)
		if stored.GetGeneration() != 2 {
			t.Fatalf("round %d: generation %d, want 2: created, then stopped", round, stored.GetGeneration())
		}
		d := h.Deployment("ls", id)
		if d.GetStatus() != scheduler.StatusStopped || d.GetComplete() != reported {
			t.Fatalf("round %d: %s with %d complete, want stopped with the %d last reported", round, d.GetStatus(), d.GetComplete(), reported)
		}
		h.Reconcile("ls")
	}
}

// TestProgressLeavesTheDeploymentsGenerationAlone: a deployment is created
// at generation 1 and stays there while the scheduler starts it, reports
// its progress and ends it, each report saying which generation it
// observed; a user's stop moves it.
func TestProgressLeavesTheDeploymentsGenerationAlone(t *testing.T) {
	h := schedulertest.New(t)
	h.Fleet()
	h.CreateLoggers("ls", 1)
	check := func(when, id string, gen uint64, want string) {
		t.Helper()
		res := readDeployment(t, h, id)
		if res.GetGeneration() != gen {
			t.Fatalf("%s: generation %d, want %d", when, res.GetGeneration(), gen)
		}
		if og := res.GetStatus()[scheduler.StatusKey].GetObservedGeneration(); og != 1 {
			t.Fatalf("%s: the progress observed generation %d, want 1", when, og)
		}
		if d := h.Deployment("ls", id); d.GetStatus() != want {
			t.Fatalf("%s: %s, want %s", when, d.GetStatus(), want)
		}
		if d := requestOf(t, res); d.GetStatus() != "" || d.GetTotal() != 0 || d.GetStartTime() != nil {
			t.Fatalf("%s: progress in the data: %v", when, d)
		}
	}
	id := startDeployment(t, h)
	check("started", id, 1, scheduler.StatusInProgress)
	h.Settle("ls")
	check("completed", id, 1, scheduler.StatusCompleted)

	if _, err := h.Ops.UpdateEnvironment(h.Ctx, "default", "ls", operations.Spec{TaskDefinition: h.TaskDefinition("ls", 2)}); err != nil {
		t.Fatal(err)
	}
	id = startDeployment(t, h)
	if _, err := h.Ops.StopDeployment(h.Ctx, "default", "ls", id); err != nil {
		t.Fatal(err)
	}
	check("stopped", id, 2, scheduler.StatusStopped)
}

// countingAPI counts the writes that reach the store, and the status
// entries that ride in a WriteBatch.
type countingAPI struct {
	resource.API
	mu                   sync.Mutex
	writes, batchReports int
}

func (c *countingAPI) count(reports int) {
	c.mu.Lock()
	c.writes++
	c.batchReports += reports
	c.mu.Unlock()
}

func (c *countingAPI) Write(ctx context.Context, req *pbresource.WriteRequest) (*pbresource.WriteResponse, error) {
	c.count(0)
	return c.API.Write(ctx, req)
}

func (c *countingAPI) WriteBatch(ctx context.Context, req *pbresource.WriteBatchRequest) (*pbresource.WriteBatchResponse, error) {
	c.count(len(req.GetStatuses()))
	return c.API.WriteBatch(ctx, req)
}

func (c *countingAPI) WriteStatus(ctx context.Context, req *pbresource.WriteStatusRequest) (*pbresource.WriteStatusResponse, error) {
	c.count(0)
	return c.API.WriteStatus(ctx, req)
}

func (c *countingAPI) WriteStatuses(ctx context.Context, req *pbresource.WriteStatusesRequest) (*pbresource.WriteStatusesResponse, error) {
	c.count(0)
	return c.API.WriteStatuses(ctx, req)
}

// TestARunWritesOnce: through a rolling deployment, a run that places or
// stops tasks writes them, the deployment's progress and the
// environment's status in one write (the reports ride in the plan's
// batch), as when the progress was the deployment's data; only the run
// that starts the deployment writes twice (the start, then the plan).
func TestARunWritesOnce(t *testing.T) {
	h := schedulertest.New(t)
	h.Fleet()
	h.CreateLoggers("ls", 1)
	h.Deploy("ls", "")
	h.Settle("ls")
	if _, err := h.Ops.UpdateEnvironment(h.Ctx, "default", "ls", operations.Spec{TaskDefinition: h.TaskDefinition("ls", 2)}); err != nil {
		t.Fatal(err)
	}
	id := h.Deploy("ls", "")
	api := &countingAPI{API: h.API}
	ctl, err := controllers.Controller(controllers.Config{API: api, Now: h.Clock.Now, Cache: h.Cache})
	if err != nil {
		t.Fatal(err)
	}
	for run := 0; ; run++ {
		if run == 50 {
			t.Fatal("the deployment does not complete")
		}
		api.writes = 0
		var requeue *controller.RequeueAfterError
		if err := ctl.Reconciler.Reconcile(h.Ctx, controller.Request{ID: scheduler.EnvironmentID("default", "ls")}); err != nil && !errors.As(err, &requeue) {
			t.Fatalf("run %d: %v", run, err)
		}
		if want := map[bool]int{true: 2, false: 1}[run == 0]; api.writes > want {
			t.Fatalf("run %d wrote %d times, want at most %d", run, api.writes, want)
		}
		if h.Deployment("ls", id).GetStatus() == scheduler.StatusCompleted {
			break
		}
		h.Agents()
	}
	if api.batchReports == 0 {
		t.Fatal("no report rode in a plan's batch")
	}
}
