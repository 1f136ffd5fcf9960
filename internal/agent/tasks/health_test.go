package tasks

import (
	"testing"
	"time"

	"trellis.dev/trellis/internal/agent/component"
	"trellis.dev/trellis/internal/orchestrator"
)

// A snapshot's health, as the components see it, is in the one
// vocabulary, judged by orchestrator.TaskHealth and ContainerHealth.
func TestHealthOf(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	run := Snapshot{Status: orchestrator.StatusRunning, Health: orchestrator.HealthUnhealthy, StartedAt: t0, Containers: []ContainerStatus{
		{Name: "app", Status: orchestrator.StatusRunning, Health: orchestrator.HealthUnhealthy, HealthOutput: "exit code 1"},
		{Name: "side", Status: orchestrator.StatusRunning},
	}}
	h := healthOf(run)
	want := component.TaskHealth{Status: orchestrator.StatusRunning, Health: orchestrator.TaskUnhealthy, Containers: []component.ContainerHealth{
		{Name: "app", HasCheck: true, Health: orchestrator.TaskUnhealthy, Output: "exit code 1"},
		{Name: "side", Health: orchestrator.TaskHealthy},
	}}
	if !sameHealth(h, want) {
		t.Errorf("running: %+v, want %+v", h, want)
	}
	stopping := run
	stopping.StoppingAt, stopping.StopReason = t0.Add(time.Minute), "stopped by user"
	if h := healthOf(stopping); !h.Stopping || h.StopReason != "stopped by user" || sameHealth(h, want) {
		t.Errorf("stopping: %+v", h)
	}
	if h := healthOf(Snapshot{Status: orchestrator.StatusStopped}); !h.Stopping || h.Health != "" {
		t.Errorf("stopped: %+v", h)
	}
	if h := healthOf(Snapshot{}); h.Status != orchestrator.StatusPending || h.Stopping || h.Health != "" {
		t.Errorf("pending: %+v", h)
	}
}
