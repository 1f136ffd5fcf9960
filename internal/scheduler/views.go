package scheduler

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/orchestrator"
)

// TaskHealthy reports whether a task is meant to run, runs and is
// healthy by orchestrator.TaskHealth: its checks pass, or it has none (a
// task without checks is healthy once it runs, as in ECS).
func TaskHealthy(t *pborch.Task, st *pborch.TaskStatus) bool {
	return t.GetDesiredStatus() == orchestrator.StatusRunning && orchestrator.TaskHealth(st) == orchestrator.TaskHealthy
}

// TaskViewOf turns a stored task of environment env (t is res's data) into
// what a plan reads: what was placed, and what its agent reports
// (status["agent"]).
func TaskViewOf(env string, res *pbresource.Resource, t *pborch.Task) TaskView {
	st := orchestrator.TaskStatusOf(res)
	v := TaskView{
		Name:           res.GetId().GetName(),
		Instance:       t.GetInstance(),
		TaskDefinition: t.GetTaskDefinition(),
		Version:        t.GetEnvironmentVersion(),
		Deployment:     t.GetDeployment(),
		Desired:        t.GetDesiredStatus(),
		Last:           st.GetLastStatus(),
		Health:         st.GetHealth(),
		Shown:          orchestrator.TaskHealth(st),
		Healthy:        TaskHealthy(t, st),
		CreatedAt:      t.GetCreatedAt().AsTime(),
		Started:        st.GetStartedAt() != nil,
		StopReason:     orchestrator.TaskStopReason(t, st),
	}
	if v.Healthy {
		v.HealthySince = healthySince(st)
	}
	v.Seq, _ = TaskSeq(env, t.GetInstance(), v.Name)
	return v
}

// InstanceViewOf turns a stored instance into what a plan reads.
func InstanceViewOf(res *pbresource.Resource) (InstanceView, bool) {
	in, err := orchestrator.DecodeInstance(res)
	if err != nil {
		return InstanceView{}, false
	}
	return InstanceView{Name: res.GetId().GetName(), Cluster: in.GetCluster(), Status: in.GetStatus(), Attributes: in.GetAttributes()}, true
}

// healthySince is when a healthy task became healthy, by its agent's
// clock. A task without health checks is healthy from the last thing that
// happened to its containers (a start, a restart, an exit): the agent
// timed those, and counting from its report instead would add the
// report's trip to every min_healthy_time, which a rolling update waits
// out once per batch. A task with checks counts from its last report, the
// first that could have said HEALTHY: no check records when it passed.
func healthySince(t *pborch.TaskStatus) time.Time {
	var since time.Time
	checked := t.GetHealth() == orchestrator.HealthHealthy || orchestrator.TaskHasChecks(t)
	for _, c := range t.GetContainers() {
		for _, at := range []*timestamppb.Timestamp{c.GetStartedAt(), c.GetFinishedAt()} {
			if at != nil && at.AsTime().After(since) {
				since = at.AsTime()
			}
		}
	}
	if t.GetStartedAt() != nil && t.GetStartedAt().AsTime().After(since) {
		since = t.GetStartedAt().AsTime()
	}
	if checked || since.IsZero() {
		return t.GetReportedAt().AsTime()
	}
	return since
}
