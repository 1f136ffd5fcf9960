package taskrunner

import (
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/agent/health"
	"trellis.dev/trellis/internal/agent/lifecycle"
	"trellis.dev/trellis/internal/driver"
	"trellis.dev/trellis/internal/orchestrator"
)

// RestartJitter is the jitter of restart delays: ±25%.
const RestartJitter = 0.25

// Build maps a task definition onto the lifecycle's spec. driverSpec
// gives each container's driver.Spec (the agent's RunnerConfig.DriverSpec:
// the definition's fields, the agent's environment, the task's
// directories).
func Build(taskID, uid string, td *pborch.TaskDefinition, driverSpec func(*pborch.ContainerDefinition) driver.Spec) lifecycle.TaskSpec {
	spec := lifecycle.TaskSpec{TaskID: taskID, TaskUID: uid}
	if p := td.GetRestartPolicy(); p != nil {
		s := orchestrator.RestartPolicySettings(p)
		spec.RestartPolicy = lifecycle.RestartPolicy{Attempts: s.Attempts, Interval: s.Interval, Delay: s.Delay, Jitter: RestartJitter}
	}
	for _, c := range td.GetContainers() {
		cs := lifecycle.ContainerSpec{
			Name:        c.GetName(),
			Driver:      c.GetDriver(),
			Spec:        driverSpec(c),
			Essential:   c.GetEssential(),
			Sidecar:     c.GetSidecar(),
			StopTimeout: orchestrator.StopTimeout(c),
		}
		for _, d := range c.GetDependsOn() {
			cond := d.GetCondition()
			if cond == "" {
				cond = orchestrator.ConditionStart
			}
			cs.DependsOn = append(cs.DependsOn, lifecycle.Dependency{Container: d.GetContainer(), Condition: lifecycle.Condition(cond)})
		}
		if h := c.GetHealthCheck(); h != nil {
			// Registration validated the check, so its settings parse.
			s, _ := orchestrator.HealthCheckSettings("", h)
			cs.Health = &health.Check{
				Command:     h.GetCommand(),
				HTTP:        h.GetHttp(),
				TCP:         h.GetTcp(),
				Interval:    s.Interval,
				Timeout:     s.Timeout,
				Retries:     s.Retries,
				StartPeriod: s.StartPeriod,
			}
		}
		spec.Containers = append(spec.Containers, cs)
	}
	return spec
}

// TaskHealth is the task's health over its containers that have health
// checks: UNHEALTHY when any fails its check, HEALTHY when the task runs
// and all pass, UNKNOWN otherwise (and for a task with no checks).
func TaskHealth(spec lifecycle.TaskSpec, st lifecycle.State) string {
	checked, healthy := 0, 0
	for i, c := range spec.Containers {
		if c.Health == nil || i >= len(st.Containers) {
			continue
		}
		checked++
		switch st.Containers[i].Health.Status {
		case health.Unhealthy:
			return orchestrator.HealthUnhealthy
		case health.Healthy:
			healthy++
		}
	}
	if checked > 0 && healthy == checked && st.Status == lifecycle.TaskRunning {
		return orchestrator.HealthHealthy
	}
	return orchestrator.HealthUnknown
}

// containerHealth is a container's reported health: "" without a check.
func containerHealth(hasCheck bool, s health.Status) string {
	if !hasCheck {
		return ""
	}
	if s == "" {
		return orchestrator.HealthUnknown
	}
	return string(s) // health.Status is the report's vocabulary
}

func oomReason(c lifecycle.ContainerState) string {
	if c.OOMKilled && c.Reason == "" {
		return "killed at its memory limit (OOM)"
	}
	return c.Reason
}
