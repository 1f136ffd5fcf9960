package command

import (
	"testing"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
)

// task list and task show print the health env status prints: one word
// per task, by the scheduler's rule, whatever the agent's raw field says.
func TestTaskHealthWords(t *testing.T) {
	checked := func(h string) []*pborch.ContainerState {
		return []*pborch.ContainerState{{Name: "app", Status: "RUNNING", Health: h}, {Name: "proxy", Status: "RUNNING"}}
	}
	for _, tc := range []struct {
		name         string
		task         *pborch.TaskStatus
		cell, detail string
	}{
		{"running, no checks (the agent says UNKNOWN)", &pborch.TaskStatus{LastStatus: "RUNNING", Health: "UNKNOWN", Containers: []*pborch.ContainerState{{Name: "app", Status: "RUNNING"}}},
			"healthy", "healthy (no health checks: healthy once it runs)"},
		{"running, checks pass", &pborch.TaskStatus{LastStatus: "RUNNING", Health: "HEALTHY", Containers: checked("HEALTHY")}, "healthy", "healthy"},
		{"running, checks not passed yet", &pborch.TaskStatus{LastStatus: "RUNNING", Health: "UNKNOWN", Containers: checked("UNKNOWN")},
			"unknown", "unknown (its health checks have not passed yet)"},
		{"running, a check fails", &pborch.TaskStatus{LastStatus: "RUNNING", Health: "UNHEALTHY", Containers: checked("UNHEALTHY")}, "unhealthy", "unhealthy"},
		{"lost", &pborch.TaskStatus{LastStatus: "LOST", Health: "HEALTHY", Containers: checked("HEALTHY")}, "unknown", "unknown (its instance stopped reporting)"},
		{"pending", &pborch.TaskStatus{LastStatus: "PENDING", Health: "UNKNOWN"}, "-", "-"},
		{"stopped", &pborch.TaskStatus{LastStatus: "STOPPED", Health: "UNHEALTHY", Containers: checked("UNHEALTHY")}, "-", "-"},
	} {
		if got := TaskHealth(tc.task); got != tc.cell {
			t.Errorf("%s: TaskHealth = %q, want %q", tc.name, got, tc.cell)
		}
		if got := TaskHealthDetail(tc.task); got != tc.detail {
			t.Errorf("%s: TaskHealthDetail = %q, want %q", tc.name, got, tc.detail)
		}
	}
	for in, want := range map[string]string{"HEALTHY": "healthy", "UNHEALTHY": "unhealthy", "UNKNOWN": "unknown", "": "-"} {
		if got := CheckHealth(in); got != want {
			t.Errorf("CheckHealth(%q) = %q, want %q", in, got, want)
		}
	}
}
