package controllers

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/scheduler"
)

// Reconcile converges one environment.
func (r *reconciler) Reconcile(ctx context.Context, req controller.Request) error {
	// The scheduler writes the environments it manages, which only the
	// scheduler's own code may (resource.Registration.WrittenThrough).
	// It alone writes their status["daemon-scheduler"].
	ctx = resource.AsController(resource.FromOperations(ctx), ControllerName)
	st, err := r.read(ctx, req.ID)
	if err != nil {
		return err
	}
	if st == nil {
		// Gone: nothing matches.
		r.instances.forget(envKey(req.ID))
		return nil
	}
	now := r.now()
	if st.env.GetDeleting() {
		// Nothing runs for an environment being deleted.
		inactive := proto.Clone(st.status).(*pbscheduler.EnvironmentStatus)
		inactive.Status = scheduler.EnvInactive
		if err := r.report(ctx, st, inactive); err != nil {
			return err
		}
		return r.teardown(ctx, st)
	}
	if st.status.GetActiveDeployment() == "" {
		promoted, err := r.promote(ctx, st, now)
		if err != nil {
			return err
		}
		if promoted {
			// Go on at once with the deployment just started, on a fresh
			// read (its writes changed the deployments, and so the
			// status: the deployment in progress is now the active one).
			if st, err = r.read(ctx, req.ID); err != nil || st == nil {
				return err
			}
		}
	}
	if st.status.GetStatus() != scheduler.EnvActive {
		// An inactive environment places nothing, so nothing is blocked.
		inactive := st.status
		if len(inactive.GetBlocked()) > 0 {
			inactive = proto.Clone(inactive).(*pbscheduler.EnvironmentStatus)
			inactive.Blocked = nil
		}
		if err := r.report(ctx, st, inactive); err != nil {
			return err
		}
		return r.collect(ctx, st)
	}
	ver := st.versions[st.status.GetDesiredVersion()]
	if ver == nil {
		return controller.Terminal(fmt.Errorf("environment %s: its desired version %s is missing", st.res.GetId().GetName(), st.status.GetDesiredVersion()))
	}
	group, err := scheduler.ParseGroup("instance_group", ver.GetInstanceGroup())
	if err != nil {
		return controller.Terminal(err)
	}
	rollout, err := scheduler.ParseRollout("deployment", ver.GetDeployment())
	if err != nil {
		return controller.Terminal(err)
	}
	active := st.deployment(st.status.GetActiveDeployment())
	if active != nil && active.Data.GetStatus() != scheduler.StatusInProgress {
		active = nil
	}
	// Tasks of another task definition are replaced during a user
	// deployment, and after one completed: an instance that was down
	// throughout it comes back with the old version, and is brought up to
	// date like any other. After a failed deployment they are left as
	// they are (a rollback or a new deployment decides).
	replace := active != nil || st.status.GetLastCompletedVersion() == st.status.GetDesiredVersion()
	ns := st.res.GetId().GetTenancy().GetNamespace()
	target := scheduler.Target{TaskDefinition: ver.GetTaskDefinition(), Version: st.status.GetDesiredVersion(), Group: group, Rollout: rollout, Replace: replace,
		Needs: r.needs(ns, ver.GetTaskDefinition()), PortHolders: r.portHolders(ns)}
	views := viewsOf(st.tasks)
	matching := r.instances.matching(envKey(st.res.GetId()), st.status.GetDesiredVersion(), group)
	unlock := r.lockPorts(target.Needs)
	plan := scheduler.ComputePlan(target, matching.Relevant(views), views, now)
	writes, err := r.planWrites(st, plan, target, active, ver.GetNumber(), now)
	if err != nil {
		unlock()
		return err
	}
	recheck, reports, rollbacks, after, err := r.progress(st, plan, views, active, rollout, group, now)
	if err != nil {
		unlock()
		return err
	}
	// The status follows from the deployments as this run leaves them.
	// The plan (with the deployments it creates), the progress it makes
	// and the status go in one write, the reports as the status entries of
	// the plan's last batch: a run costs one commit, not two, a batch of a
	// rollout starts a round trip sooner, and the status is never stored
	// without the progress it follows from.
	next := scheduler.ReportStatus(st.status, after, st.versions)
	next.Blocked = scheduler.BlockedOf(plan)
	envReport, err := r.statusReport(st, next)
	if err != nil {
		unlock()
		return err
	}
	if envReport != nil {
		reports = append(reports, envReport)
	}
	out, err := r.writeAll(ctx, append(writes, rollbacks...), reports)
	unlock()
	if err != nil {
		return err
	}
	if envReport != nil {
		r.reported(st, next, out[len(out)-1])
	}
	if len(plan.Places) > 0 || len(plan.Stops) > 0 {
		r.log.Debug("plan applied", "environment", st.res.GetId().GetName(), "places", len(plan.Places), "stops", len(plan.Stops))
	}
	// Clean-up waits until no user deployment runs: a rollout stops a
	// task per instance, and deleting them one by one meanwhile would
	// compete with it for Raft.
	if active == nil {
		if err := r.collect(ctx, st); err != nil {
			return err
		}
	}
	recheck = scheduler.Earliest(recheck, plan.Recheck)
	if !recheck.IsZero() {
		return controller.RequeueAfter(max(recheck.Sub(now), 10*time.Millisecond))
	}
	return nil
}

// envState is everything a reconcile reads of one environment.
type envState struct {
	res *pbresource.Resource
	env *pbscheduler.Environment
	// reported is the status stored; status is what the deployments read
	// make of it (scheduler.ReportStatus): what the run acts on, and
	// reports when it differs.
	reported, status *pbscheduler.EnvironmentStatus
	versions         map[string]*pbscheduler.EnvironmentVersion
	deployments      []*scheduler.StoredDeployment
	tasks            []*storedTask
	instances        []scheduler.InstanceView
}

// storedTask is a task of the environment, as the cache made it
// (taskView): shared with every run, never modified.
type storedTask struct {
	res  *pbresource.Resource
	t    *pborch.Task
	view scheduler.TaskView
}

// read loads an environment and what it owns, and the instances; nil when
// the environment is gone.
func (r *reconciler) read(ctx context.Context, id *pbresource.ID) (*envState, error) {
	resp, err := r.api.Read(ctx, &pbresource.ReadRequest{Id: id})
	if status.Code(err) == codes.NotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	st := &envState{res: resp.GetResource(), versions: map[string]*pbscheduler.EnvironmentVersion{}}
	if st.env, err = resource.DecodeData[*pbscheduler.Environment](st.res); err != nil {
		return nil, controller.Terminal(err)
	}
	versions, err := scheduler.ListOwned(ctx, r.api, st.res, scheduler.EnvironmentVersionType, false)
	if err != nil {
		return nil, err
	}
	for _, o := range versions {
		if v, err := resource.DecodeData[*pbscheduler.EnvironmentVersion](o); err == nil {
			st.versions[o.GetId().GetName()] = v
		}
	}
	deployments, err := scheduler.ListOwned(ctx, r.api, st.res, scheduler.DeploymentType, false)
	if err != nil {
		return nil, err
	}
	st.deployments = scheduler.DecodeDeployments(deployments)
	if st.reported, err = scheduler.EnvironmentStatusOf(st.res); err != nil {
		return nil, controller.Terminal(err)
	}
	st.status = scheduler.ReportStatus(st.reported, st.deployments, st.versions)

	st.tasks = tasksOf(r.cache, st.res.GetId())
	st.instances = r.instances.all()
	return st, nil
}

func (st *envState) deployment(id string) *scheduler.StoredDeployment {
	for _, d := range st.deployments {
		if d.Res.GetId().GetName() == id {
			return d
		}
	}
	return nil
}

func viewsOf(tasks []*storedTask) []scheduler.TaskView {
	out := make([]scheduler.TaskView, len(tasks))
	for i, t := range tasks {
		out[i] = t.view
	}
	return out
}

// report writes the environment's status when next differs from what is
// stored, or the generation it acted on moved (statusReport).
func (r *reconciler) report(ctx context.Context, st *envState, next *pbscheduler.EnvironmentStatus) error {
	req, err := r.statusReport(st, next)
	if req == nil || err != nil {
		return err
	}
	out, err := r.writeStatuses(ctx, []*pbresource.WriteStatusRequest{req})
	if err != nil {
		return fmt.Errorf("reporting the status of environment %s: %w", st.res.GetId().GetName(), err)
	}
	r.reported(st, next, out[0])
	return nil
}

// statusReport is the write of the environment's status next, nil when
// it is what is stored for the generation read. It is not a
// compare-and-swap: the controller alone writes its key, so a user's
// change of the environment meanwhile is no reason to fail; the uid keeps
// it from reporting on a re-created environment.
func (r *reconciler) statusReport(st *envState, next *pbscheduler.EnvironmentStatus) (*pbresource.WriteStatusRequest, error) {
	gen := st.res.GetGeneration()
	if stored := st.res.GetStatus()[scheduler.StatusKey]; stored != nil && stored.GetObservedGeneration() == gen && proto.Equal(next, st.reported) {
		return nil, nil
	}
	data, err := anypb.New(next)
	if err != nil {
		return nil, err
	}
	return &pbresource.WriteStatusRequest{Id: st.res.GetId(), Key: scheduler.StatusKey,
		Status: &pbresource.Status{ObservedGeneration: gen, Data: data}}, nil
}

// reported follows a status report that was stored: out is the
// environment as it left it.
func (r *reconciler) reported(st *envState, next *pbscheduler.EnvironmentStatus, out *pbresource.Resource) {
	// The instances it is blocked on are filed at once (blockedOn), not
	// when the watch brings the status: a task freeing a port there
	// meanwhile runs the environment again.
	r.cache.Apply(controller.Event{Resource: out})
	if next.GetStatus() != st.reported.GetStatus() || next.GetActiveDeployment() != st.reported.GetActiveDeployment() || next.GetHealth() != st.reported.GetHealth() {
		r.log.Debug("environment status", "environment", st.res.GetId().GetName(), "status", next.GetStatus(), "health", next.GetHealth(), "active_deployment", next.GetActiveDeployment())
	}
}
