package controllers

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/scheduler"
)

// Reconcile converges one environment.
func (r *reconciler) Reconcile(ctx context.Context, req controller.Request) error {
	// The scheduler writes the environments it manages, which only the
	// scheduler's own code may (resource.Registration.WrittenThrough).
	ctx = resource.FromOperations(ctx)
	st, err := r.read(ctx, req.ID)
	if err != nil || st == nil {
		return err
	}
	now := r.now()
	if st.env.GetDeleting() {
		return r.teardown(ctx, st)
	}
	if st.env.GetActiveDeployment() == "" {
		promoted, err := r.promote(ctx, st, now)
		if err != nil {
			return err
		}
		if promoted {
			// Go on at once with the deployment just started, on a fresh
			// read (its writes changed the environment and deployments).
			if st, err = r.read(ctx, req.ID); err != nil || st == nil {
				return err
			}
		}
	}
	if st.env.GetStatus() != scheduler.EnvActive {
		return r.collect(ctx, st)
	}
	ver := st.versions[st.env.GetDesiredVersion()]
	if ver == nil {
		return controller.Terminal(fmt.Errorf("environment %s: its desired version %s is missing", st.res.GetId().GetName(), st.env.GetDesiredVersion()))
	}
	group, err := scheduler.ParseGroup("instance_group", ver.GetInstanceGroup())
	if err != nil {
		return controller.Terminal(err)
	}
	rollout, err := scheduler.ParseRollout("deployment", ver.GetDeployment())
	if err != nil {
		return controller.Terminal(err)
	}
	active := st.deployment(st.env.GetActiveDeployment())
	if active != nil && active.Data.GetStatus() != scheduler.StatusInProgress {
		active = nil
	}
	// Tasks of another task definition are replaced during a user
	// deployment, and after one completed: an instance that was down
	// throughout it comes back with the old version, and is brought up to
	// date like any other. After a failed deployment they are left as
	// they are (a rollback or a new deployment decides).
	replace := active != nil || st.env.GetLastCompletedVersion() == st.env.GetDesiredVersion()
	target := scheduler.Target{TaskDefinition: ver.GetTaskDefinition(), Version: st.env.GetDesiredVersion(), Group: group, Rollout: rollout, Replace: replace}
	views := viewsOf(st.tasks)
	matching := r.cache.matching(envKey(st.res.GetId()), st.env.GetDesiredVersion(), group)
	plan := scheduler.ComputePlan(target, matching.Relevant(views), views, now)
	writes, err := r.planWrites(st, plan, target, active, ver.GetNumber(), now)
	if err != nil {
		return err
	}
	recheck, progressWrites, err := r.progress(st, plan, views, active, rollout, group, now)
	if err != nil {
		return err
	}
	// The plan and the progress it makes go in one write: a run costs one
	// commit, not two, and a batch of a rollout starts a round trip sooner.
	if err := r.writeAll(ctx, append(writes, progressWrites...)); err != nil {
		return err
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
	res         *pbresource.Resource
	env         *pbscheduler.Environment
	versions    map[string]*pbscheduler.EnvironmentVersion
	deployments []*scheduler.StoredDeployment
	tasks       []*storedTask
	instances   []scheduler.InstanceView
}

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
	name, uid := st.res.GetId().GetName(), st.res.GetId().GetUid()
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

	key := envKey(st.res.GetId())
	instances, instancesPrimed, tasks, tasksPrimed := r.cache.snapshot(key)
	if !instancesPrimed {
		list, err := r.api.List(ctx, &pbresource.ListRequest{Type: orchestrator.InstanceType, Tenancy: &pbresource.Tenancy{}})
		if err != nil {
			return nil, err
		}
		r.cache.primeInstances(list.GetResources())
	}
	if !tasksPrimed {
		r.cache.beginPrime(key)
		owned, err := r.api.ListByOwner(ctx, &pbresource.ListByOwnerRequest{Owner: st.res.GetId()})
		if err != nil {
			return nil, err
		}
		var mine []*storedTask
		for _, o := range owned.GetResources() {
			if !ids.SameType(o.GetId().GetType(), orchestrator.TaskType) {
				continue
			}
			if t, err := resource.DecodeData[*pborch.Task](o); err == nil {
				mine = append(mine, &storedTask{res: o, t: t, view: scheduler.TaskViewOf(name, o, t)})
			}
		}
		r.cache.primeTasks(key, mine)
	}
	if !instancesPrimed || !tasksPrimed {
		instances, _, tasks, _ = r.cache.snapshot(key)
	}
	// Tasks of an earlier incarnation of the environment are not ours.
	for _, t := range tasks {
		if t.res.GetOwner().GetUid() == uid {
			st.tasks = append(st.tasks, t)
		}
	}
	st.instances = instances
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
