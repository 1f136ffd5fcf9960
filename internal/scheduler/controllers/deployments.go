package controllers

import (
	"context"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/scheduler"
)

// promote starts the newest pending user deployment, cancelling older
// pending ones, when none is in progress, in one batch of progress
// reports, each a CAS on the deployment read (a user's stop meanwhile
// fails it, and the next run sees the stop). The status follows
// (scheduler.ReportStatus): the environment becomes active with the
// deployment's version as its desired one.
func (r *reconciler) promote(ctx context.Context, st *envState, now time.Time) (bool, error) {
	var pending []*scheduler.StoredDeployment
	for _, d := range st.deployments {
		if d.Data.GetType() == scheduler.DeploymentUser && d.Data.GetStatus() == scheduler.StatusPending {
			pending = append(pending, d)
		}
	}
	if len(pending) == 0 {
		return false, nil
	}
	next := pending[len(pending)-1] // names are ULIDs: the newest sorts last
	ver := st.versions[next.Data.GetVersion()]
	var reports []*pbresource.WriteStatusRequest
	end := func(d *scheduler.StoredDeployment, reason string) error {
		x := proto.Clone(d.Data).(*pbscheduler.Deployment)
		x.Status, x.StatusReason, x.EndTime = scheduler.StatusCanceled, reason, timestamppb.New(now)
		w, err := scheduler.ReportProgress(d.Res, x)
		reports = append(reports, w)
		return err
	}
	for _, d := range pending[:len(pending)-1] {
		if err := end(d, "a newer deployment was started: "+next.Res.GetId().GetName()); err != nil {
			return false, err
		}
	}
	if ver == nil {
		if err := end(next, "its version "+next.Data.GetVersion()+" no longer exists"); err != nil {
			return false, err
		}
		_, err := r.writeStatuses(ctx, reports)
		return true, err
	}
	x := proto.Clone(next.Data).(*pbscheduler.Deployment)
	x.Status, x.StartTime, x.LastProgressAt = scheduler.StatusInProgress, timestamppb.New(now), timestamppb.New(now)
	x.StatusReason = ""
	w, err := scheduler.ReportProgress(next.Res, x)
	if err != nil {
		return false, err
	}
	reports = append(reports, w)
	r.log.Info("deployment started", "environment", st.res.GetId().GetName(), "deployment", next.Res.GetId().GetName(), "version", ver.GetNumber())
	_, err = r.writeStatuses(ctx, reports)
	return true, err
}

// planWrites are the writes of a plan: the stops (CAS on the task read)
// and the placements (create-only, under names keyed by environment and
// instance), with the monitor deployments that account for placements
// made while no user deployment runs. A monitor is created in progress
// (scheduler.MergeDeployment); the next run, which its tasks bring,
// reports how far it is.
func (r *reconciler) planWrites(st *envState, plan scheduler.Plan, target scheduler.Target, active *scheduler.StoredDeployment, number int64, now time.Time) ([]*pbresource.Resource, error) {
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
		w, err := scheduler.WithData(t.res, next)
		if err != nil {
			return nil, err
		}
		writes = append(writes, w)
	}
	depOf := map[bool]string{}
	if active != nil {
		depOf[false], depOf[true] = active.Res.GetId().GetName(), active.Res.GetId().GetName()
	} else {
		counts := map[bool]int{}
		for _, p := range plan.Places {
			counts[p.Repair]++
		}
		for _, repair := range []bool{false, true} {
			if counts[repair] == 0 {
				continue
			}
			typ := scheduler.DeploymentNewInstance
			if repair {
				typ = scheduler.DeploymentHealthRepair
			}
			id, err := scheduler.NewDeploymentID(now)
			if err != nil {
				return nil, err
			}
			d := &pbscheduler.Deployment{
				Environment: env, Version: target.Version, VersionNumber: number, TaskDefinition: target.TaskDefinition,
				Type: typ, CreatedAt: timestamppb.New(now),
			}
			res, err := scheduler.NewResource(scheduler.DeploymentID(ns, id), st.res.GetId(), d)
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
			CreatedAt:          timestamppb.New(now),
			Environment:        env,
			EnvironmentVersion: target.Version,
			Deployment:         depOf[p.Repair],
			Replaces:           p.Replaces,
		}
		res, err := scheduler.NewResource(orchestrator.TaskID(ns, scheduler.TaskName(env, p.Instance, p.Seq)), st.res.GetId(), t)
		if err != nil {
			return nil, err
		}
		res.Version = resource.CreateOnly
		writes = append(writes, res)
	}
	return writes, nil
}

// progress returns the progress reports that update the in-progress
// deployments from the plan and the tasks and end those that are done,
// the deployments an auto_rollback creates, the deployments as these
// writes leave them (from which the environment's status follows), and
// when time alone may change that.
func (r *reconciler) progress(st *envState, plan scheduler.Plan, views []scheduler.TaskView, active *scheduler.StoredDeployment, rollout scheduler.Rollout, group scheduler.Group, now time.Time) (time.Time, []*pbresource.WriteStatusRequest, []*pbresource.Resource, []*scheduler.StoredDeployment, error) {
	var recheck time.Time
	var reports []*pbresource.WriteStatusRequest
	var writes []*pbresource.Resource
	after := make([]*scheduler.StoredDeployment, 0, len(st.deployments))
	for _, d := range st.deployments {
		if d.Data.GetStatus() != scheduler.StatusInProgress {
			after = append(after, d)
			continue
		}
		view := scheduler.DeploymentView{ID: d.Res.GetId().GetName(), Type: d.Data.GetType(), TaskDef: d.Data.GetTaskDefinition(),
			StartTime: d.Data.GetStartTime().AsTime(), LastProgress: d.Data.GetLastProgressAt().AsTime()}
		var pr scheduler.Progress
		switch {
		case active != nil && d == active:
			pr = scheduler.UserProgress(view, plan, rollout, now)
		case d.Data.GetType() == scheduler.DeploymentUser:
			// In progress, but not the environment's active deployment:
			// a leftover of a crash between two writes. The active one
			// decides; this one is over.
			pr = scheduler.Progress{Status: scheduler.StatusCanceled, Reason: "another deployment is the environment's active one"}
		default:
			pr = scheduler.MonitorProgress(view, views, rollout, now)
		}
		if d == active && pr.Status == scheduler.StatusCompleted && pr.Total == 0 && pr.Blocked == 0 {
			// "0/0 complete" reads as success: say that nothing runs, and why.
			pr.Reason = scheduler.NothingPlaced(group, st.instances)
		}
		recheck = scheduler.Earliest(recheck, pr.Recheck)
		next := proto.Clone(d.Data).(*pbscheduler.Deployment)
		if int32(pr.Complete) > next.Complete {
			next.LastProgressAt = timestamppb.New(now)
		}
		next.Total, next.Complete, next.Failed, next.Blocked, next.Instances = int32(pr.Total), int32(pr.Complete), int32(pr.Failed), int32(pr.Blocked), pr.Instances
		if d.Data.GetType() == scheduler.DeploymentUser || next.BatchSize == 0 {
			// A monitor's is the batch size of the run that created it.
			next.BatchSize = int32(plan.BatchSize)
		}
		if pr.Status != "" {
			next.Status, next.StatusReason, next.EndTime = pr.Status, pr.Reason, timestamppb.New(now)
		}
		if (pr.Status == scheduler.StatusUnhealthy || pr.Status == scheduler.StatusTimedOut) && d == active && rollout.AutoRollback {
			// The failed deployment names its rollback, written in the
			// same batch, so that whoever watches it ending (deploy
			// --wait) learns at once what happens next.
			switch to := st.status.GetLastCompletedVersion(); {
			case to == "":
				next.StatusReason += "; auto_rollback: no version has completed a deployment, so there is none to roll back to"
			case to == d.Data.GetVersion():
				next.StatusReason += "; auto_rollback: this version is the last that completed, so there is none to roll back to"
			default:
				rb, rbd, err := r.rollbackDeployment(st, d, now)
				if err != nil {
					return recheck, nil, nil, nil, err
				}
				next.RollbackDeployment, next.RollbackVersionNumber = rb.GetId().GetName(), rbd.GetVersionNumber()
				writes = append(writes, rb)
				after = append(after, &scheduler.StoredDeployment{Res: rb, Data: rbd})
			}
		}
		if pr.Status != "" {
			r.log.Info("deployment ended", "environment", st.res.GetId().GetName(), "deployment", view.ID, "type", view.Type, "status", pr.Status, "reason", next.StatusReason)
		}
		if !proto.Equal(next, d.Data) {
			w, err := scheduler.ReportProgress(d.Res, next)
			if err != nil {
				return recheck, nil, nil, nil, err
			}
			reports = append(reports, w)
		}
		after = append(after, &scheduler.StoredDeployment{Res: d.Res, Data: next})
	}
	return recheck, reports, writes, after, nil
}

// rollbackDeployment is the pending user deployment auto_rollback starts
// after failed: the last version that completed.
func (r *reconciler) rollbackDeployment(st *envState, failed *scheduler.StoredDeployment, now time.Time) (*pbresource.Resource, *pbscheduler.Deployment, error) {
	ver := st.versions[st.status.GetLastCompletedVersion()]
	id, err := scheduler.NewDeploymentID(now)
	if err != nil {
		return nil, nil, err
	}
	// Pending, with the auto_rollback's reason (scheduler.MergeDeployment):
	// its request is all there is to write.
	d := &pbscheduler.Deployment{
		Environment: st.res.GetId().GetName(), Version: st.status.GetLastCompletedVersion(), VersionNumber: ver.GetNumber(),
		TaskDefinition: ver.GetTaskDefinition(), Type: scheduler.DeploymentUser, CreatedAt: timestamppb.New(now),
		RollbackOf: failed.Res.GetId().GetName(),
	}
	res, err := scheduler.NewResource(scheduler.DeploymentID(st.res.GetId().GetTenancy().GetNamespace(), id), st.res.GetId(), d)
	if err != nil {
		return nil, nil, err
	}
	res.Version = resource.CreateOnly
	r.log.Warn("rolling back", "environment", st.res.GetId().GetName(), "failed", failed.Res.GetId().GetName(), "to_version", ver.GetNumber())
	return res, scheduler.MergeDeployment(d, nil), nil
}
