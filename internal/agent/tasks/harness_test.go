package tasks

import (
	"errors"
	"testing"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
)

func shDefinition(family string, script string) *pborch.TaskDefinition {
	return &pborch.TaskDefinition{
		Family: family, Revision: 1,
		Containers: []*pborch.ContainerDefinition{{
			Name: "app", Driver: "exec", Command: []string{"/bin/sh", "-c", script},
		}},
	}
}

// newManager is the task manager of instance i-1, never resumed and
// attached to no server: its decisions are driven by hand, and a task it
// would start goes back to idle (no runner is ever made).
func newManager(t *testing.T) *Manager {
	t.Helper()
	m, err := New(Config{
		Instance: "i-1", DataDir: t.TempDir(), Session: "s1",
		NewRunner: func(RunnerConfig) (TaskRunner, error) { return nil, errors.New("this test runs no task") },
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}
