// Package taskspec converts between the orchestrator's resources and the
// plain values of the agent's task lifecycle: a TaskDefinition becomes a
// lifecycle.TaskSpec to run, and a lifecycle.State becomes the fields of
// the Task resource that the agent reports. Both directions are pure.
package taskspec

import (
	"maps"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/agent/health"
	"trellis.dev/trellis/internal/agent/lifecycle"
	"trellis.dev/trellis/internal/driver"
	"trellis.dev/trellis/internal/orchestrator"
)

// RestartJitter is the jitter of restart delays: ±25%.
const RestartJitter = 0.25

// Dirs are where a task's files go on the agent's host.
type Dirs struct {
	// TaskDir is the task's private directory; logs go to TaskDir/logs.
	TaskDir string
}

// Build maps a task definition onto the lifecycle's spec for the task
// namespace/name with uid. env is added to every container's environment
// under the definition's own (TRELLIS_TASK_METADATA_URI and the like).
func Build(namespace, name, uid string, td *pborch.TaskDefinition, dirs Dirs, env map[string]string) lifecycle.TaskSpec {
	spec := lifecycle.TaskSpec{
		TaskID:  namespace + "/" + name,
		TaskUID: uid,
	}
	if p := td.GetRestartPolicy(); p != nil {
		s := orchestrator.RestartPolicySettings(p)
		spec.RestartPolicy = lifecycle.RestartPolicy{Attempts: s.Attempts, Interval: s.Interval, Delay: s.Delay, Jitter: RestartJitter}
	}
	for _, c := range td.GetContainers() {
		cenv := maps.Clone(env)
		if cenv == nil {
			cenv = map[string]string{}
		}
		maps.Copy(cenv, c.GetEnv())
		ports := make([]int, len(c.GetPorts()))
		for i, p := range c.GetPorts() {
			ports[i] = int(p)
		}
		cs := lifecycle.ContainerSpec{
			Name:   c.GetName(),
			Driver: c.GetDriver(),
			Spec: driver.Spec{
				TaskID:      spec.TaskID,
				TaskUID:     uid,
				Container:   c.GetName(),
				Image:       c.GetImage(),
				Command:     c.GetCommand(),
				Env:         cenv,
				WorkingDir:  c.GetWorkingDir(),
				Ports:       ports,
				CPUMillis:   c.GetResources().GetCpuMillis(),
				MemoryBytes: c.GetResources().GetMemoryBytes(),
				LogDir:      filepath.Join(dirs.TaskDir, "logs"),
				TaskDir:     dirs.TaskDir,
			},
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

// Report writes what the lifecycle state says into the agent-owned fields
// of a Task: last status, containers, health, times and stop reason. The
// fields the placer owns (desired status, instance, task definition,
// started_by) are left alone. The task is HEALTHY when it runs and every
// container with a health check passes it, UNHEALTHY when any fails it.
func Report(spec lifecycle.TaskSpec, st lifecycle.State, t *pborch.Task) {
	checks := make(map[string]bool, len(spec.Containers))
	for _, c := range spec.Containers {
		checks[c.Name] = c.Health != nil
	}
	t.LastStatus = string(st.Status)
	if st.StopReason != "" {
		t.StopReason = st.StopReason
	}
	t.StartedAt = stamp(st.StartedAt)
	t.StoppingAt = stamp(st.StoppingAt)
	t.StoppedAt = stamp(st.StoppedAt)
	t.Containers = t.Containers[:0]
	healthy, unhealthy, checked := 0, 0, 0
	for _, has := range checks {
		if has {
			checked++
		}
	}
	for _, c := range st.Containers {
		cs := &pborch.ContainerState{
			Name:       c.Name,
			Status:     string(c.Status),
			Health:     healthString(c.Health.Status),
			Reason:     c.Reason,
			Restarts:   int32(c.RestartCount),
			StartedAt:  stamp(c.StartedAt),
			FinishedAt: stamp(c.FinishedAt),
		}
		if c.ExitCode != nil {
			code := int32(*c.ExitCode)
			cs.ExitCode = &code
		}
		if c.OOMKilled && cs.Reason == "" {
			cs.Reason = "killed at its memory limit (OOM)"
		}
		if c.Handle != nil {
			cs.RuntimeId = c.Handle.ID
		}
		t.Containers = append(t.Containers, cs)
		if checks[c.Name] {
			switch c.Health.Status {
			case health.Healthy:
				healthy++
			case health.Unhealthy:
				unhealthy++
			}
		}
	}
	switch {
	case unhealthy > 0:
		t.Health = orchestrator.HealthUnhealthy
	case checked > 0 && st.Status == lifecycle.TaskRunning && healthy == checked:
		t.Health = orchestrator.HealthHealthy
	default:
		t.Health = orchestrator.HealthUnknown
	}
}

func healthString(s health.Status) string {
	if s == "" {
		return orchestrator.HealthUnknown
	}
	return strings.ToUpper(string(s))
}

func stamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}
