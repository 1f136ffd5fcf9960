package taskrunner

import (
	"encoding/json"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/agent"
	"trellis.dev/trellis/internal/agent/health"
	"trellis.dev/trellis/internal/agent/lifecycle"
	"trellis.dev/trellis/internal/driver"
)

func definition() *pborch.TaskDefinition {
	return &pborch.TaskDefinition{
		Family: "web", Revision: 2,
		Containers: []*pborch.ContainerDefinition{
			{Name: "app", Driver: "exec", Command: []string{"/bin/web"}, Env: map[string]string{"A": "1"},
				Ports: []uint32{8080}, Essential: proto.Bool(true), StopTimeout: "10s",
				DependsOn:   []*pborch.Dependency{{Container: "proxy", Condition: "HEALTHY"}},
				HealthCheck: &pborch.HealthCheck{Http: "http://127.0.0.1:8080/", Interval: "5s", Timeout: "2s", StartPeriod: "10s"},
				Resources:   &pborch.Resources{CpuMillis: 500, MemoryBytes: 64 << 20}},
			{Name: "proxy", Driver: "exec", Command: []string{"sleep", "1000"}, Sidecar: true, Essential: proto.Bool(false)},
		},
		RestartPolicy: &pborch.RestartPolicy{Attempts: 3, Interval: "5m", Delay: "5s"},
	}
}

func runnerConfig() agent.RunnerConfig {
	return agent.RunnerConfig{
		TaskID: "default/t1", Namespace: "default", Name: "t1", UID: "UID", Definition: definition(),
		Env: map[string]string{"TRELLIS_TASK_METADATA_URI": "http://m"}, Dir: "/data/tasks/UID", LogDir: "/data/tasks/UID/logs",
	}
}

func TestBuild(t *testing.T) {
	rc := runnerConfig()
	spec := Build(rc.TaskID, rc.UID, rc.Definition, rc.DriverSpec)
	if err := spec.Validate(); err != nil {
		t.Fatalf("built spec is invalid: %v", err)
	}
	app := spec.Containers[0]
	if spec.TaskID != "default/t1" || app.Spec.TaskUID != "UID" || app.Spec.LogDir != "/data/tasks/UID/logs" || app.Spec.CPUMillis != 500 {
		t.Fatalf("spec %+v", spec)
	}
	if app.Spec.Env["TRELLIS_TASK_METADATA_URI"] != "http://m" || app.Spec.Env["A"] != "1" {
		t.Fatalf("env %v", app.Spec.Env)
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
	if spec.Containers[1].Essential || !spec.Containers[1].Sidecar || spec.Containers[1].Health != nil {
		t.Fatalf("proxy %+v", spec.Containers[1])
	}
}

func TestSnapshot(t *testing.T) {
	rc := runnerConfig()
	spec := Build(rc.TaskID, rc.UID, rc.Definition, rc.DriverSpec)
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	zero := 0
	st := lifecycle.State{
		TaskID: "default/t1", Status: lifecycle.TaskRunning, StartedAt: now,
		Containers: []lifecycle.ContainerState{
			{Name: "app", Status: lifecycle.ContainerRunning, StartedAt: now, Handle: &driver.Handle{ID: "4242"}, Health: health.Tracker{Status: health.Unknown}},
			{Name: "proxy", Status: lifecycle.ContainerStopped, ExitCode: &zero, FinishedAt: now, OOMKilled: true},
		},
	}
	s := Snapshot(spec, st)
	if s.Status != "RUNNING" || s.Health != "UNKNOWN" || !s.StartedAt.Equal(now) {
		t.Fatalf("snapshot %+v", s)
	}
	if c := s.Containers[0]; c.RuntimeID != "4242" || c.Health != "UNKNOWN" || c.ExitCode != nil {
		t.Fatalf("app %+v", c)
	}
	if c := s.Containers[1]; c.ExitCode == nil || *c.ExitCode != 0 || c.Health != "" || c.Reason != "killed at its memory limit (OOM)" {
		t.Fatalf("proxy %+v", c)
	}
	var back lifecycle.State
	if err := json.Unmarshal(s.State, &back); err != nil || back.TaskID != "default/t1" || back.Containers[0].Handle.ID != "4242" {
		t.Fatalf("state does not round-trip: %v %+v", err, back)
	}
	st.Containers[0].Health.Status = health.Healthy
	if h := Snapshot(spec, st).Health; h != "HEALTHY" {
		t.Fatalf("healthy: %s", h)
	}
	st.Containers[0].Health.Status = health.Unhealthy
	if h := Snapshot(spec, st).Health; h != "UNHEALTHY" {
		t.Fatalf("unhealthy: %s", h)
	}
	// The check's output goes with the container's health (health-sync
	// writes it into the catalog's check); a container without a check
	// has none.
	st.Containers[0].Health.Output = "exit code 1: not ready"
	st.Containers[1].Health.Output = "stale"
	s = Snapshot(spec, st)
	if s.Containers[0].HealthOutput != "exit code 1: not ready" || s.Containers[1].HealthOutput != "" {
		t.Fatalf("health outputs %q, %q", s.Containers[0].HealthOutput, s.Containers[1].HealthOutput)
	}
}
