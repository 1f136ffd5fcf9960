package scheduler

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/orchestrator"
)

func TestHealthySince(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 7, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(t0.Add(d)) }
	running := func(containers ...*pborch.ContainerState) *pborch.TaskStatus {
		return &pborch.TaskStatus{LastStatus: orchestrator.StatusRunning,
			Health: orchestrator.HealthUnknown, StartedAt: at(0), ReportedAt: at(300 * time.Millisecond), Containers: containers}
	}
	for _, tc := range []struct {
		name string
		task *pborch.TaskStatus
		want time.Duration
	}{
		{"no checks: from the start, not the report",
			running(&pborch.ContainerState{Name: "main", Status: "RUNNING", StartedAt: at(0)}), 0},
		{"no checks: a restarted container counts from its new start",
			running(&pborch.ContainerState{Name: "main", Status: "RUNNING", Restarts: 1, StartedAt: at(200 * time.Millisecond)}), 200 * time.Millisecond},
		{"no checks: a container that exited counts from its exit",
			running(&pborch.ContainerState{Name: "main", Status: "RUNNING", StartedAt: at(0)},
				&pborch.ContainerState{Name: "init", Status: "STOPPED", StartedAt: at(0), FinishedAt: at(100 * time.Millisecond)}), 100 * time.Millisecond},
		{"checks: from the report that said HEALTHY",
			func() *pborch.TaskStatus {
				tk := running(&pborch.ContainerState{Name: "main", Status: "RUNNING", Health: orchestrator.HealthHealthy, StartedAt: at(0)})
				tk.Health = orchestrator.HealthHealthy
				return tk
			}(), 300 * time.Millisecond},
		{"nothing timed by the agent: from the report",
			func() *pborch.TaskStatus { tk := running(); tk.StartedAt = nil; return tk }(), 300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			placed := &pborch.Task{Instance: "i-1", DesiredStatus: orchestrator.StatusRunning}
			v := TaskViewOf("env", reportedTask(t, "env-x-1", tc.task), placed)
			if !v.Healthy {
				t.Fatal("the task is not healthy")
			}
			if got := v.HealthySince.Sub(t0); got != tc.want {
				t.Errorf("healthy since start+%s, want start+%s", got, tc.want)
			}
		})
	}
}
