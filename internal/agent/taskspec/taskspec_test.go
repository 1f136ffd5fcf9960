package taskspec

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/agent/health"
	"trellis.dev/trellis/internal/agent/lifecycle"
	"trellis.dev/trellis/internal/driver"
)

func definition() *pborch.TaskDefinition {
	return &pborch.TaskDefinition{
		Family: "web", Revision: 2,
		Containers: []*pborch.ContainerDefinition{
			{Name: "app", Driver: "exec", Command: []string{"/bin/web"}, Env: map[string]string{"A": "1", "TRELLIS_X": "mine"},
				Ports: []uint32{8080}, Essential: proto.Bool(true), StopTimeout: "10s",
				DependsOn:   []*pborch.Dependency{{Container: "proxy", Condition: "HEALTHY"}},
				HealthCheck: &pborch.HealthCheck{Http: "http://127.0.0.1:8080/", Interval: "5s", Timeout: "2s", StartPeriod: "10s"},
				Resources:   &pborch.Resources{CpuMillis: 500, MemoryBytes: 64 << 20}},
			{Name: "proxy", Driver: "exec", Command: []string{"sleep", "1000"}, Sidecar: true, Essential: proto.Bool(false)},
		},
		RestartPolicy: &pborch.RestartPolicy{Attempts: 3, Interval: "5m", Delay: "5s"},
	}
}

func TestBuild(t *testing.T) {
	spec := Build("default", "t1", "UID", definition(), Dirs{TaskDir: "/data/tasks/t1"}, map[string]string{"TRELLIS_X": "agent", "TRELLIS_TASK_METADATA_URI": "http://m"})
	if err := spec.Validate(); err != nil {
		t.Fatalf("built spec is invalid: %v", err)
	}
	app := spec.Containers[0]
	if spec.TaskID != "default/t1" || app.Spec.TaskUID != "UID" || app.Spec.LogDir != "/data/tasks/t1/logs" || app.Spec.CPUMillis != 500 {
		t.Fatalf("spec %+v", spec)
	}
	if app.Spec.Env["TRELLIS_X"] != "mine" || app.Spec.Env["TRELLIS_TASK_METADATA_URI"] != "http://m" || app.Spec.Env["A"] != "1" {
		t.Fatalf("env %v: the definition's own must win over the agent's", app.Spec.Env)
	}
	if app.StopTimeout != 10*time.Second || app.Health.Interval != 5*time.Second || app.Health.Retries != 3 || app.Health.StartPeriod != 10*time.Second {
		t.Fatalf("timings %+v %+v", app, app.Health)
	}
	if app.DependsOn[0] != (lifecycle.Dependency{Container: "proxy", Condition: lifecycle.CondHealthy}) {
		t.Fatalf("depends_on %+v", app.DependsOn)
	}
	if p := spec.RestartPolicy; p.Attempts != 3 || p.Interval != 5*time.Minute || p.Delay != 5*time.Second || p.Jitter != RestartJitter {
		t.Fatalf("restart policy %+v", p)
	}
	if spec.Containers[1].Essential || !spec.Containers[1].Sidecar {
		t.Fatalf("proxy %+v", spec.Containers[1])
	}
}

func TestReport(t *testing.T) {
	spec := Build("default", "t1", "UID", definition(), Dirs{TaskDir: "/tmp/t1"}, nil)
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	zero := 0
	st := lifecycle.State{
		Status: lifecycle.TaskRunning, StartedAt: now,
		Containers: []lifecycle.ContainerState{
			{Name: "app", Status: lifecycle.ContainerRunning, StartedAt: now, Handle: &driver.Handle{ID: "4242"}, Health: health.Tracker{Status: health.Unknown}},
			{Name: "proxy", Status: lifecycle.ContainerStopped, ExitCode: &zero, FinishedAt: now},
		},
	}
	task := &pborch.Task{DesiredStatus: "RUNNING", Instance: "i-1"}
	Report(spec, st, task)
	if task.LastStatus != "RUNNING" || task.Health != "UNKNOWN" || task.DesiredStatus != "RUNNING" || task.Instance != "i-1" {
		t.Fatalf("task %v", task)
	}
	if c := task.Containers[0]; c.RuntimeId != "4242" || c.Health != "UNKNOWN" || c.ExitCode != nil {
		t.Fatalf("app %v", c)
	}
	if c := task.Containers[1]; c.GetExitCode() != 0 || c.ExitCode == nil || c.Status != "STOPPED" {
		t.Fatalf("proxy %v", c)
	}
	st.Containers[0].Health.Status = health.Healthy
	Report(spec, st, task)
	if task.Health != "HEALTHY" || len(task.Containers) != 2 {
		t.Fatalf("healthy: %v", task)
	}
	st.Containers[0].Health.Status = health.Unhealthy
	Report(spec, st, task)
	if task.Health != "UNHEALTHY" {
		t.Fatalf("unhealthy: %v", task)
	}
}
