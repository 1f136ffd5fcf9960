package scheduler

import (
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
)

// TaskHealthy reports whether a task runs and passes its health checks:
// RUNNING, and HEALTHY when any container has a check (a task without
// checks is healthy once it runs, as in ECS).
func TaskHealthy(t *pborch.Task) bool {
	if t.GetLastStatus() != orchestrator.StatusRunning || t.GetDesiredStatus() != orchestrator.StatusRunning {
		return false
	}
	if t.GetHealth() == orchestrator.HealthHealthy {
		return true
	}
	if t.GetHealth() == orchestrator.HealthUnhealthy {
		return false
	}
	for _, c := range t.GetContainers() {
		if c.GetHealth() != "" {
			return false // checked, and not yet healthy
		}
	}
	return true
}

// taskView turns a stored task of environment env into what a plan reads.
// A healthy task counts as healthy since its last report: agents report
// on every change, so that is when it became healthy (or later), by the
// agent's clock.
func taskView(env string, res *pbresource.Resource, t *pborch.Task) TaskView {
	v := TaskView{
		Name:           res.GetId().GetName(),
		Instance:       t.GetInstance(),
		TaskDefinition: t.GetTaskDefinition(),
		Version:        t.GetEnvironmentVersion(),
		Deployment:     t.GetDeployment(),
		Desired:        t.GetDesiredStatus(),
		Last:           t.GetLastStatus(),
		Health:         t.GetHealth(),
		Healthy:        TaskHealthy(t),
		CreatedAt:      t.GetCreatedAt().AsTime(),
		Started:        t.GetStartedAt() != nil,
		StopReason:     t.GetStopReason(),
	}
	if v.Healthy {
		v.HealthySince = t.GetReportedAt().AsTime()
		if t.GetReportedAt() == nil {
			v.HealthySince = t.GetStartedAt().AsTime()
		}
	}
	v.Seq, _ = TaskSeq(env, t.GetInstance(), v.Name)
	return v
}

// instanceView turns a stored instance into what a plan reads.
func instanceView(res *pbresource.Resource) (InstanceView, bool) {
	in, err := resource.DecodeData[*pborch.Instance](res)
	if err != nil {
		return InstanceView{}, false
	}
	return InstanceView{Name: res.GetId().GetName(), Cluster: in.GetCluster(), Status: in.GetStatus(), Attributes: in.GetAttributes()}, true
}
