package controllers

import (
	"context"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/scheduler"
)

// teardown stops an environment that is being deleted: its deployments
// end, its tasks are asked to stop, and once none runs on a live
// instance the environment is deleted (its versions, deployments and
// tasks with it, by the owner reaper).
func (r *reconciler) teardown(ctx context.Context, st *envState) error {
	now := r.now()
	var reports []*pbresource.WriteStatusRequest
	for _, d := range st.deployments {
		if scheduler.DeploymentDone(d.Data.GetStatus()) {
			continue
		}
		x := proto.Clone(d.Data).(*pbscheduler.Deployment)
		x.Status, x.StatusReason, x.EndTime = scheduler.StatusStopped, "the environment is being deleted", timestamppb.New(now)
		if d.Data.GetStatus() == scheduler.StatusPending {
			x.Status = scheduler.StatusCanceled
		}
		w, err := scheduler.ReportProgress(d.Res, x)
		if err != nil {
			return err
		}
		reports = append(reports, w)
	}
	var writes []*pbresource.Resource
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
		w, err := scheduler.WithData(t.res, next)
		if err != nil {
			return err
		}
		writes = append(writes, w)
	}
	if len(writes) > 0 || len(reports) > 0 {
		_, err := r.writeAll(ctx, writes, reports)
		return err
	}
	if waiting > 0 {
		return nil // their reports will bring us back
	}
	done := controller.Waiting(ctx)
	_, err := r.api.Delete(ctx, &pbresource.DeleteRequest{Id: st.res.GetId(), Version: st.res.GetVersion()})
	done()
	if err != nil {
		return err
	}
	r.log.Info("environment deleted", "environment", st.res.GetId().GetName())
	return nil
}
