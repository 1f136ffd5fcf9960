package orchestrator

import (
	"testing"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
)

func TestTaskHealth(t *testing.T) {
	plain := []*pborch.ContainerState{{Name: "main", Status: StatusRunning}}
	checked := func(h string) []*pborch.ContainerState {
		return []*pborch.ContainerState{{Name: "main", Status: StatusRunning, Health: h}, {Name: "log", Status: StatusRunning}}
	}
	for _, tc := range []struct {
		name       string
		last       string
		health     string
		containers []*pborch.ContainerState
		want       string
	}{
		{"running without checks is healthy", StatusRunning, HealthUnknown, plain, TaskHealthy},
		{"running without checks, nothing reported of its containers yet", StatusRunning, HealthUnknown, nil, TaskHealthy},
		{"running, checks not passed yet", StatusRunning, HealthUnknown, checked(HealthUnknown), TaskHealthUnknown},
		{"running, checks pass", StatusRunning, HealthHealthy, checked(HealthHealthy), TaskHealthy},
		{"running, a check fails", StatusRunning, HealthUnhealthy, checked(HealthUnhealthy), TaskUnhealthy},
		{"lost: its instance stopped reporting", StatusLost, HealthHealthy, checked(HealthHealthy), TaskHealthUnknown},
		{"lost without checks", StatusLost, HealthUnknown, plain, TaskHealthUnknown},
		{"pending has no health yet", StatusPending, HealthUnknown, nil, ""},
		{"stopped has none any more", StatusStopped, HealthUnhealthy, checked(HealthUnhealthy), ""},
	} {
		got := TaskHealth(&pborch.TaskStatus{LastStatus: tc.last, Health: tc.health, Containers: tc.containers})
		if got != tc.want {
			t.Errorf("%s: TaskHealth = %q, want %q", tc.name, got, tc.want)
		}
	}
}
