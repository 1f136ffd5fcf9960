package controllers

import (
	"context"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/scheduler"
)

// collect deletes what an environment no longer needs: tasks that
// stopped and are not the newest of their instance (the newest keeps the
// instance's seq), and finished deployments beyond the newest
// keepDeployments.
func (r *reconciler) collect(ctx context.Context, st *envState) error {
	var doomed []*pbresource.Resource
	if slices.ContainsFunc(st.tasks, func(t *storedTask) bool { return !t.view.Live() }) {
		latest := scheduler.LatestTasks(viewsOf(st.tasks))
		for _, t := range st.tasks {
			if !t.view.Live() && latest[t.view.Instance].Name != t.view.Name {
				doomed = append(doomed, t.res)
			}
		}
	}
	var done []*scheduler.StoredDeployment
	for _, d := range st.deployments {
		if scheduler.DeploymentDone(d.Data.GetStatus()) {
			done = append(done, d)
		}
	}
	if len(done) > keepDeployments {
		for _, d := range done[:len(done)-keepDeployments] {
			doomed = append(doomed, d.Res)
		}
	}
	for i, res := range doomed {
		if i == maxDeletes {
			return controller.RequeueAfter(time.Second)
		}
		done := controller.Waiting(ctx)
		_, err := r.api.Delete(ctx, &pbresource.DeleteRequest{Id: res.GetId(), Version: res.GetVersion()})
		done()
		if err != nil && status.Code(err) != codes.Aborted && status.Code(err) != codes.NotFound {
			return err
		}
		// Seen deleted at once, not when the watch brings it, so that the
		// next run does not delete it again.
		if ids.SameType(res.GetId().GetType(), orchestrator.TaskType) {
			r.cache.Apply(controller.Event{Resource: res, Deleted: true})
		}
	}
	return nil
}
