package scheduler

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
)

// ControllerName is the daemon scheduler's controller.
const ControllerName = "daemon-scheduler"

// Tunables of the controller.
const (
	// writeChunk bounds the members of one WriteBatch.
	writeChunk = 1000
	// keepDeployments is how many finished deployments an environment
	// keeps.
	keepDeployments = 50
	// maxDeletes bounds the old tasks and deployments one reconcile
	// deletes.
	maxDeletes = 200
	// DefaultResync is how often every environment is reconciled even
	// when nothing changed.
	DefaultResync = time.Minute
)

// Config is what the controller needs.
type Config struct {
	API    resource.API
	Logger *slog.Logger
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Resync is the full resync period (DefaultResync when zero).
	Resync time.Duration
}

// Controller returns the daemon scheduler's controller. Its requests are
// environments; it watches their deployments and tasks (owned by them)
// and every instance (an instance change may change what matches).
func Controller(cfg Config) controller.Controller {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Resync == 0 {
		cfg.Resync = DefaultResync
	}
	r := &reconciler{api: cfg.API, now: cfg.Now, log: cfg.Logger.With("controller", ControllerName), envs: map[string]*pbresource.ID{}, cache: newCache(), notBefore: map[string]time.Time{}}
	return controller.Controller{
		Name:        ControllerName,
		ManagedType: EnvironmentType,
		Watches: []controller.Watch{
			{Type: EnvironmentType, Map: r.mapEnvironment},
			{Type: DeploymentType, Map: controller.MapOwner},
			{Type: orchestrator.TaskType, Map: r.mapTask},
			{Type: orchestrator.InstanceType, Map: r.mapInstance},
		},
		Reconciler:   r,
		ResyncPeriod: cfg.Resync,
		Workers:      4,
		OnStart:      r.startTerm,
	}
}

type reconciler struct {
	api resource.API
	now func() time.Time
	log *slog.Logger

	mu   sync.Mutex
	envs map[string]*pbresource.ID // every environment, for mapInstance

	cache *cache
	// notBefore is, per environment, when its next run may start.
	notBefore map[string]time.Time
}

func (r *reconciler) mapEnvironment(ev controller.Event, look controller.Lookup) []controller.Request {
	id := ev.Resource.GetId()
	key := ids.String(id)
	r.mu.Lock()
	if ev.Deleted {
		delete(r.envs, key)
		delete(r.notBefore, envKey(id))
		r.cache.forgetEnvironment(envKey(id))
	} else {
		c := proto.Clone(id).(*pbresource.ID)
		c.Uid = ""
		r.envs[key] = c
	}
	r.mu.Unlock()
	return controller.MapSelf(ev, look)
}

// startTerm forgets what an earlier term cached: while another server
// led, tasks and instances changed and were deleted without this
// server's watches seeing it. The cache is primed again at first use.
func (r *reconciler) startTerm() {
	r.cache.reset()
	r.mu.Lock()
	r.notBefore = map[string]time.Time{}
	r.mu.Unlock()
}

// mapTask keeps the cache of tasks and maps a task to its environment.
func (r *reconciler) mapTask(ev controller.Event, look controller.Lookup) []controller.Request {
	r.cache.observeTask(ev.Resource, ev.Deleted)
	return controller.MapOwner(ev, look)
}

// mapInstance keeps the cache of instances and asks for every
// environment: whether an instance matches is the reconciler's to decide,
// and environments are few.
func (r *reconciler) mapInstance(ev controller.Event, _ controller.Lookup) []controller.Request {
	r.cache.observeInstance(ev.Resource, ev.Deleted)
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]controller.Request, 0, len(r.envs))
	for _, id := range r.envs {
		out = append(out, controller.Request{ID: id})
	}
	return out
}

// envState is everything a reconcile reads of one environment.
type envState struct {
	res         *pbresource.Resource
	env         *pbscheduler.Environment
	versions    map[string]*pbscheduler.EnvironmentVersion
	deployments []*deployment
	tasks       []*storedTask
	instances   []InstanceView
}

type deployment struct {
	res *pbresource.Resource
	d   *pbscheduler.Deployment
}

type storedTask struct {
	res  *pbresource.Resource
	t    *pborch.Task
	view TaskView
}

// Reconcile converges one environment. Under a stream of changes (a
// fleet reporting thousands of tasks) it works at most a third of the
// time for one environment: after a run that worked for w, the next waits
// 2w. A run's work is its time less its waits for its writes to commit,
// which cost the leader no CPU: counting them made the pause longer than
// the bound needs, and each batch of a rollout waited it out. Each run
// handles every change since the last, so this bounds the leader's CPU
// without slowing what a run achieves; small environments (runs of a
// millisecond) are not slowed at all.
func (r *reconciler) Reconcile(ctx context.Context, req controller.Request) error {
	key := envKey(req.ID)
	start := r.now()
	r.mu.Lock()
	notBefore := r.notBefore[key]
	r.mu.Unlock()
	if start.Before(notBefore) {
		return controller.RequeueAfter(notBefore.Sub(start))
	}
	run := &runClock{}
	err := r.reconcile(withRunClock(ctx, run), req)
	end := r.now()
	work := max(end.Sub(start)-run.committing(), 0)
	r.mu.Lock()
	r.notBefore[key] = end.Add(min(2*work, maxPause))
	r.mu.Unlock()
	return err
}

// maxPause bounds the pause between two runs for one environment.
const maxPause = 250 * time.Millisecond

func (r *reconciler) reconcile(ctx context.Context, req controller.Request) error {
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
	if st.env.GetStatus() != EnvActive {
		return r.collect(ctx, st)
	}
	ver := st.versions[st.env.GetDesiredVersion()]
	if ver == nil {
		return controller.Terminal(fmt.Errorf("environment %s: its desired version %s is missing", st.res.GetId().GetName(), st.env.GetDesiredVersion()))
	}
	group, err := ParseGroup("instance_group", ver.GetInstanceGroup())
	if err != nil {
		return controller.Terminal(err)
	}
	rollout, err := ParseRollout("deployment", ver.GetDeployment())
	if err != nil {
		return controller.Terminal(err)
	}
	active := st.deployment(st.env.GetActiveDeployment())
	if active != nil && active.d.GetStatus() != StatusInProgress {
		active = nil
	}
	// Tasks of another task definition are replaced during a user
	// deployment, and after one completed: an instance that was down
	// throughout it comes back with the old version, and is brought up to
	// date like any other. After a failed deployment they are left as
	// they are (a rollback or a new deployment decides).
	replace := active != nil || st.env.GetLastCompletedVersion() == st.env.GetDesiredVersion()
	target := Target{TaskDefinition: ver.GetTaskDefinition(), Version: st.env.GetDesiredVersion(), Group: group, Rollout: rollout, Replace: replace}
	views := viewsOf(st.tasks)
	matching := r.cache.matching(envKey(st.res.GetId()), st.env.GetDesiredVersion(), group)
	plan := ComputePlan(target, matching.Relevant(views), views, now)
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
	recheck = earliest(recheck, plan.Recheck)
	if !recheck.IsZero() {
		return controller.RequeueAfter(max(recheck.Sub(now), 10*time.Millisecond))
	}
	return nil
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
	versions, err := listOwned(ctx, r.api, st.res, EnvironmentVersionType, false)
	if err != nil {
		return nil, err
	}
	for _, o := range versions {
		if v, err := resource.DecodeData[*pbscheduler.EnvironmentVersion](o); err == nil {
			st.versions[o.GetId().GetName()] = v
		}
	}
	deployments, err := listOwned(ctx, r.api, st.res, DeploymentType, false)
	if err != nil {
		return nil, err
	}
	st.deployments = decodeDeployments(deployments)

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
				mine = append(mine, &storedTask{res: o, t: t, view: taskView(name, o, t)})
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

func (st *envState) deployment(id string) *deployment {
	for _, d := range st.deployments {
		if d.res.GetId().GetName() == id {
			return d
		}
	}
	return nil
}

// promote starts the newest pending user deployment, cancelling older
// pending ones, when none is in progress: the environment becomes active
// with the deployment's version as its desired one, in one CAS batch.
func (r *reconciler) promote(ctx context.Context, st *envState, now time.Time) (bool, error) {
	var pending []*deployment
	for _, d := range st.deployments {
		if d.d.GetType() == DeploymentUser && d.d.GetStatus() == StatusPending {
			pending = append(pending, d)
		}
	}
	if len(pending) == 0 {
		return false, nil
	}
	next := pending[len(pending)-1] // names are ULIDs: the newest sorts last
	ver := st.versions[next.d.GetVersion()]
	writes := []*pbresource.Resource{}
	for _, d := range pending[:len(pending)-1] {
		w, err := withDeployment(d.res, func(x *pbscheduler.Deployment) {
			x.Status, x.StatusReason, x.EndTime = StatusCanceled, "a newer deployment was started: "+next.res.GetId().GetName(), timestamppb.New(now)
		})
		if err != nil {
			return false, err
		}
		writes = append(writes, w)
	}
	if ver == nil {
		w, err := withDeployment(next.res, func(x *pbscheduler.Deployment) {
			x.Status, x.StatusReason, x.EndTime = StatusCanceled, "its version "+x.GetVersion()+" no longer exists", timestamppb.New(now)
		})
		if err != nil {
			return false, err
		}
		return true, r.writeAll(ctx, append(writes, w))
	}
	w, err := withDeployment(next.res, func(x *pbscheduler.Deployment) {
		x.Status, x.StartTime, x.LastProgressAt = StatusInProgress, timestamppb.New(now), timestamppb.New(now)
		x.StatusReason = ""
	})
	if err != nil {
		return false, err
	}
	writes = append(writes, w)
	env, err := withEnvironment(st.res, func(e *pbscheduler.Environment) {
		e.Status = EnvActive
		e.DesiredVersion = next.d.GetVersion()
		e.DesiredVersionNumber = ver.GetNumber()
		e.DesiredTaskDefinition = ver.GetTaskDefinition()
		e.ActiveDeployment = next.res.GetId().GetName()
	})
	if err != nil {
		return false, err
	}
	writes = append(writes, env)
	r.log.Info("deployment started", "environment", st.res.GetId().GetName(), "deployment", next.res.GetId().GetName(), "version", ver.GetNumber())
	return true, r.writeAll(ctx, writes)
}

// planWrites are the writes of a plan: the stops (CAS on the task read)
// and the placements (create-only, under names keyed by environment and
// instance), with the monitor deployments that account for placements
// made while no user deployment runs.
func (r *reconciler) planWrites(st *envState, plan Plan, target Target, active *deployment, number int64, now time.Time) ([]*pbresource.Resource, error) {
	if len(plan.Places) == 0 && len(plan.Stops) == 0 {
		return nil, nil
	}
	ns, env := st.res.GetId().GetTenancy().GetNamespace(), st.res.GetId().GetName()
	var writes []*pbresource.Resource
	byName := map[string]*storedTask{}
	for _, t := range st.tasks {
		byName[t.res.GetId().GetName()] = t
	}
	for _, s := range plan.Stops {
		t := byName[s.Task]
		next := proto.Clone(t.t).(*pborch.Task)
		next.DesiredStatus = orchestrator.StatusStopped
		if next.StopReason == "" {
			next.StopReason = s.Reason
		}
		w, err := withData(t.res, next)
		if err != nil {
			return nil, err
		}
		writes = append(writes, w)
	}
	depOf := map[bool]string{}
	if active != nil {
		depOf[false], depOf[true] = active.res.GetId().GetName(), active.res.GetId().GetName()
	} else {
		counts := map[bool]int{}
		for _, p := range plan.Places {
			counts[p.Repair]++
		}
		for _, repair := range []bool{false, true} {
			if counts[repair] == 0 {
				continue
			}
			typ := DeploymentNewInstance
			if repair {
				typ = DeploymentHealthRepair
			}
			id, err := newDeploymentID(now)
			if err != nil {
				return nil, err
			}
			d := &pbscheduler.Deployment{
				Environment: env, Version: target.Version, VersionNumber: number, TaskDefinition: target.TaskDefinition,
				Type: typ, Status: StatusInProgress, CreatedAt: timestamppb.New(now), StartTime: timestamppb.New(now),
				LastProgressAt: timestamppb.New(now), Total: int32(counts[repair]), BatchSize: int32(plan.BatchSize),
			}
			res, err := newResource(DeploymentID(ns, id), st.res.GetId(), d)
			if err != nil {
				return nil, err
			}
			res.Version = resource.CreateOnly
			writes = append(writes, res)
			depOf[repair] = id
		}
	}
	for _, p := range plan.Places {
		t := &pborch.Task{
			TaskDefinition:     target.TaskDefinition,
			Instance:           p.Instance,
			StartedBy:          "environment/" + env,
			DesiredStatus:      orchestrator.StatusRunning,
			LastStatus:         orchestrator.StatusPending,
			Health:             orchestrator.HealthUnknown,
			CreatedAt:          timestamppb.New(now),
			Environment:        env,
			EnvironmentVersion: target.Version,
			Deployment:         depOf[p.Repair],
			Replaces:           p.Replaces,
		}
		res, err := newResource(orchestrator.TaskID(ns, TaskName(env, p.Instance, p.Seq)), st.res.GetId(), t)
		if err != nil {
			return nil, err
		}
		res.Version = resource.CreateOnly
		writes = append(writes, res)
	}
	return writes, nil
}

// progress returns the writes that update the in-progress deployments
// from the plan and the tasks, end those that are done, and keep the
// environment's health and active deployment in step; and when time alone
// may change that.
func (r *reconciler) progress(st *envState, plan Plan, views []TaskView, active *deployment, rollout Rollout, group Group, now time.Time) (time.Time, []*pbresource.Resource, error) {
	var recheck time.Time
	var writes []*pbresource.Resource
	envChanged := false
	nextEnv := proto.Clone(st.env).(*pbscheduler.Environment)
	numberVersions(nextEnv, st.versions)
	for _, d := range st.deployments {
		if d.d.GetStatus() != StatusInProgress {
			continue
		}
		view := DeploymentView{ID: d.res.GetId().GetName(), Type: d.d.GetType(), TaskDef: d.d.GetTaskDefinition(),
			StartTime: d.d.GetStartTime().AsTime(), LastProgress: d.d.GetLastProgressAt().AsTime()}
		var pr Progress
		switch {
		case active != nil && d == active:
			pr = UserProgress(view, plan, rollout, now)
		case d.d.GetType() == DeploymentUser:
			// In progress, but not the environment's active deployment:
			// a leftover of a crash between two writes. The active one
			// decides; this one is over.
			pr = Progress{Status: StatusCanceled, Reason: "another deployment is the environment's active one"}
		default:
			pr = MonitorProgress(view, views, rollout, now)
		}
		if d == active && pr.Status == StatusCompleted && pr.Total == 0 {
			// "0/0 complete" reads as success: say that nothing runs, and why.
			pr.Reason = NothingPlaced(group, st.instances)
		}
		recheck = earliest(recheck, pr.Recheck)
		next := proto.Clone(d.d).(*pbscheduler.Deployment)
		if int32(pr.Complete) > next.Complete {
			next.LastProgressAt = timestamppb.New(now)
		}
		next.Total, next.Complete, next.Failed, next.Instances = int32(pr.Total), int32(pr.Complete), int32(pr.Failed), pr.Instances
		if d.d.GetType() == DeploymentUser {
			next.BatchSize = int32(plan.BatchSize)
		}
		if pr.Status != "" {
			next.Status, next.StatusReason, next.EndTime = pr.Status, pr.Reason, timestamppb.New(now)
		}
		switch pr.Status {
		case StatusCompleted:
			if d == active {
				nextEnv.Health = HealthHealthy
				nextEnv.LastCompletedVersion = d.d.GetVersion()
				nextEnv.LastCompletedVersionNumber = d.d.GetVersionNumber()
			}
		case StatusUnhealthy, StatusTimedOut:
			nextEnv.Health = HealthUnhealthy
			if d != active || !rollout.AutoRollback {
				break
			}
			// The failed deployment names its rollback, written in the
			// same batch, so that whoever watches it ending (deploy
			// --wait) learns at once what happens next.
			switch to := st.env.GetLastCompletedVersion(); {
			case to == "":
				next.StatusReason += "; auto_rollback: no version has completed a deployment, so there is none to roll back to"
			case to == d.d.GetVersion():
				next.StatusReason += "; auto_rollback: this version is the last that completed, so there is none to roll back to"
			default:
				rb, rbd, err := r.rollbackDeployment(st, d, now)
				if err != nil {
					return recheck, nil, err
				}
				next.RollbackDeployment, next.RollbackVersionNumber = rb.GetId().GetName(), rbd.GetVersionNumber()
				writes = append(writes, rb)
			}
		}
		if pr.Status != "" {
			r.log.Info("deployment ended", "environment", st.res.GetId().GetName(), "deployment", view.ID, "type", view.Type, "status", pr.Status, "reason", next.StatusReason)
		}
		if !proto.Equal(next, d.d) {
			w, err := withData(d.res, next)
			if err != nil {
				return recheck, nil, err
			}
			writes = append(writes, w)
		}
		if d == active && pr.Status != "" {
			nextEnv.ActiveDeployment = ""
		}
	}
	if !proto.Equal(nextEnv, st.env) {
		envChanged = true
	}
	if envChanged {
		w, err := withData(st.res, nextEnv)
		if err != nil {
			return recheck, nil, err
		}
		writes = append(writes, w)
	}
	return recheck, writes, nil
}

// numberVersions fills in the numbers of an environment's desired and
// last completed versions where they are missing (an environment deployed
// before it recorded them).
func numberVersions(e *pbscheduler.Environment, versions map[string]*pbscheduler.EnvironmentVersion) {
	if v := versions[e.GetDesiredVersion()]; v != nil && e.GetDesiredVersionNumber() == 0 {
		e.DesiredVersionNumber = v.GetNumber()
	}
	if v := versions[e.GetLastCompletedVersion()]; v != nil && e.GetLastCompletedVersionNumber() == 0 {
		e.LastCompletedVersionNumber = v.GetNumber()
	}
}

// rollbackDeployment is the pending user deployment auto_rollback starts
// after failed: the last version that completed.
func (r *reconciler) rollbackDeployment(st *envState, failed *deployment, now time.Time) (*pbresource.Resource, *pbscheduler.Deployment, error) {
	ver := st.versions[st.env.GetLastCompletedVersion()]
	id, err := newDeploymentID(now)
	if err != nil {
		return nil, nil, err
	}
	d := &pbscheduler.Deployment{
		Environment: st.res.GetId().GetName(), Version: st.env.GetLastCompletedVersion(), VersionNumber: ver.GetNumber(),
		TaskDefinition: ver.GetTaskDefinition(), Type: DeploymentUser, Status: StatusPending, CreatedAt: timestamppb.New(now),
		RollbackOf:   failed.res.GetId().GetName(),
		StatusReason: "auto_rollback after deployment " + failed.res.GetId().GetName() + " failed",
	}
	res, err := newResource(DeploymentID(st.res.GetId().GetTenancy().GetNamespace(), id), st.res.GetId(), d)
	if err != nil {
		return nil, nil, err
	}
	res.Version = resource.CreateOnly
	r.log.Warn("rolling back", "environment", st.res.GetId().GetName(), "failed", failed.res.GetId().GetName(), "to_version", ver.GetNumber())
	return res, d, nil
}

// teardown stops an environment that is being deleted: its deployments
// end, its tasks are asked to stop, and once none runs on a live
// instance the environment is deleted (its versions, deployments and
// tasks with it, by the owner reaper).
func (r *reconciler) teardown(ctx context.Context, st *envState) error {
	now := r.now()
	var writes []*pbresource.Resource
	for _, d := range st.deployments {
		if DeploymentDone(d.d.GetStatus()) {
			continue
		}
		w, err := withDeployment(d.res, func(x *pbscheduler.Deployment) {
			x.Status, x.StatusReason, x.EndTime = StatusStopped, "the environment is being deleted", timestamppb.New(now)
			if d.d.GetStatus() == StatusPending {
				x.Status = StatusCanceled
			}
		})
		if err != nil {
			return err
		}
		writes = append(writes, w)
	}
	ready := map[string]bool{}
	for _, in := range st.instances {
		ready[in.Name] = in.Status == orchestrator.InstanceReady || in.Status == orchestrator.InstanceDraining
	}
	waiting := 0
	for _, t := range st.tasks {
		if !t.view.Live() {
			continue
		}
		if ready[t.view.Instance] {
			waiting++
		}
		if t.view.Desired == orchestrator.StatusStopped {
			continue
		}
		next := proto.Clone(t.t).(*pborch.Task)
		next.DesiredStatus = orchestrator.StatusStopped
		next.StopReason = "the environment " + st.res.GetId().GetName() + " is being deleted"
		w, err := withData(t.res, next)
		if err != nil {
			return err
		}
		writes = append(writes, w)
	}
	if len(writes) > 0 {
		return r.writeAll(ctx, writes)
	}
	if waiting > 0 {
		return nil // their reports will bring us back
	}
	_, err := r.api.Delete(ctx, &pbresource.DeleteRequest{Id: st.res.GetId(), Version: st.res.GetVersion()})
	if err != nil {
		return err
	}
	r.log.Info("environment deleted", "environment", st.res.GetId().GetName())
	return r.dropGuardIfLast(ctx, st.res.GetId().GetTenancy().GetNamespace())
}

// dropGuardIfLast deletes the namespace's EnvironmentGuard once no
// environment is left in it, so that it does not keep the namespace from
// being deleted. The delete is a compare-and-swap on the guard read: a
// create that read it meanwhile either lands first (and the delete fails,
// keeping the guard) or fails its own write and starts over.
func (r *reconciler) dropGuardIfLast(ctx context.Context, ns string) error {
	guard, err := r.api.Read(ctx, &pbresource.ReadRequest{Id: GuardID(ns), Consistent: true})
	if status.Code(err) == codes.NotFound {
		return nil
	}
	if err != nil {
		return err
	}
	envs, err := r.api.List(ctx, &pbresource.ListRequest{Type: EnvironmentType, Tenancy: &pbresource.Tenancy{Namespace: ns}, Consistent: true})
	if err != nil || len(envs.GetResources()) > 0 {
		return err
	}
	_, err = r.api.Delete(ctx, &pbresource.DeleteRequest{Id: guard.GetResource().GetId(), Version: guard.GetResource().GetVersion()})
	if status.Code(err) == codes.Aborted || status.Code(err) == codes.NotFound {
		return nil // a create or update wrote it meanwhile: it stays
	}
	return err
}

// collect deletes what an environment no longer needs: tasks that
// stopped and are not the newest of their instance (the newest keeps the
// instance's seq), and finished deployments beyond the newest
// keepDeployments.
func (r *reconciler) collect(ctx context.Context, st *envState) error {
	var doomed []*pbresource.Resource
	if slices.ContainsFunc(st.tasks, func(t *storedTask) bool { return !t.view.Live() }) {
		latest := latestTasks(viewsOf(st.tasks))
		for _, t := range st.tasks {
			if !t.view.Live() && latest[t.view.Instance].Name != t.view.Name {
				doomed = append(doomed, t.res)
			}
		}
	}
	var done []*deployment
	for _, d := range st.deployments {
		if DeploymentDone(d.d.GetStatus()) {
			done = append(done, d)
		}
	}
	if len(done) > keepDeployments {
		for _, d := range done[:len(done)-keepDeployments] {
			doomed = append(doomed, d.res)
		}
	}
	for i, res := range doomed {
		if i == maxDeletes {
			return controller.RequeueAfter(time.Second)
		}
		done := runClockOf(ctx).wait(r.now)
		_, err := r.api.Delete(ctx, &pbresource.DeleteRequest{Id: res.GetId(), Version: res.GetVersion()})
		done()
		if err != nil && status.Code(err) != codes.Aborted && status.Code(err) != codes.NotFound {
			return err
		}
		if ids.SameType(res.GetId().GetType(), orchestrator.TaskType) {
			r.cache.observeTask(res, true)
		}
	}
	return nil
}

func viewsOf(tasks []*storedTask) []TaskView {
	out := make([]TaskView, len(tasks))
	for i, t := range tasks {
		out[i] = t.view
	}
	return out
}

// writeAll writes in atomic batches of at most writeChunk members. All
// but the last batch go at once, so that Raft carries them together
// instead of one commit after another (a fresh deployment to 5,000
// instances is five batches); the last, which holds the run's progress
// writes, goes only once the others are in: progress is never recorded
// for placements that failed. A failed batch fails the run, which the
// next run repairs from what is stored, as it would any partial plan.
func (r *reconciler) writeAll(ctx context.Context, writes []*pbresource.Resource) error {
	if len(writes) == 0 {
		return nil
	}
	defer runClockOf(ctx).wait(r.now)()
	var chunks [][]*pbresource.Resource
	for start := 0; start < len(writes); start += writeChunk {
		chunks = append(chunks, writes[start:min(start+writeChunk, len(writes))])
	}
	last := chunks[len(chunks)-1]
	errs := make([]error, len(chunks)-1)
	var wg sync.WaitGroup
	for i, batch := range chunks[:len(chunks)-1] {
		wg.Go(func() { errs[i] = r.writeBatch(ctx, batch) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return r.writeBatch(ctx, last)
}

func (r *reconciler) writeBatch(ctx context.Context, batch []*pbresource.Resource) error {
	out, err := r.api.WriteBatch(ctx, &pbresource.WriteBatchRequest{Resources: batch})
	if err != nil {
		return fmt.Errorf("writing %d resources: %w", len(batch), err)
	}
	r.cache.written(out.GetResources())
	return nil
}

// deploymentIDs makes deployment ids: lowercase ULIDs, monotonic within a
// millisecond, so that names sort by creation.
var deploymentIDs = struct {
	sync.Mutex
	entropy *ulid.MonotonicEntropy
}{entropy: ulid.Monotonic(rand.Reader, 0)}

func newDeploymentID(now time.Time) (string, error) {
	deploymentIDs.Lock()
	defer deploymentIDs.Unlock()
	id, err := ulid.New(ulid.Timestamp(now), deploymentIDs.entropy)
	if err != nil {
		return "", err
	}
	return strings.ToLower(id.String()), nil
}

func newResource(id, owner *pbresource.ID, m proto.Message) (*pbresource.Resource, error) {
	data, err := anypb.New(m)
	if err != nil {
		return nil, err
	}
	return &pbresource.Resource{Id: id, Owner: owner, Data: data}, nil
}

// withData is res (its id, owner and version: a CAS) carrying m.
func withData(res *pbresource.Resource, m proto.Message) (*pbresource.Resource, error) {
	data, err := anypb.New(m)
	if err != nil {
		return nil, err
	}
	return &pbresource.Resource{Id: res.GetId(), Owner: res.GetOwner(), Version: res.GetVersion(), Metadata: res.GetMetadata(), Data: data}, nil
}

func withDeployment(res *pbresource.Resource, f func(*pbscheduler.Deployment)) (*pbresource.Resource, error) {
	d, err := resource.DecodeData[*pbscheduler.Deployment](res)
	if err != nil {
		return nil, err
	}
	f(d)
	return withData(res, d)
}

func withEnvironment(res *pbresource.Resource, f func(*pbscheduler.Environment)) (*pbresource.Resource, error) {
	e, err := resource.DecodeData[*pbscheduler.Environment](res)
	if err != nil {
		return nil, err
	}
	f(e)
	return withData(res, e)
}
