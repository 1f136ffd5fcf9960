package scheduler

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/types/known/anypb"
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/orchestrator"
)

// An environment's view shows each task's health by the one rule
// (orchestrator.TaskHealth): the same word task list and task show print.
func TestStateHealthWords(t *testing.T) {
	checks := func(h string) []*pborch.ContainerState {
		return []*pborch.ContainerState{{Name: "main", Status: orchestrator.StatusRunning, Health: h}}
	}
	for _, tc := range []struct {
		name        string
		status      *pborch.TaskStatus
		state, word string
		desired     string
	}{
		{"running without checks", &pborch.TaskStatus{LastStatus: "RUNNING", Health: "UNKNOWN"}, ViewActive, "healthy", ""},
		{"running, checks pass", &pborch.TaskStatus{LastStatus: "RUNNING", Health: "HEALTHY", Containers: checks("HEALTHY")}, ViewActive, "healthy", ""},
		{"running, checks not passed yet", &pborch.TaskStatus{LastStatus: "RUNNING", Health: "UNKNOWN", Containers: checks("UNKNOWN")}, ViewLaunching, "unknown", ""},
		{"running, a check fails", &pborch.TaskStatus{LastStatus: "RUNNING", Health: "UNHEALTHY", Containers: checks("UNHEALTHY")}, ViewUnhealthy, "unhealthy", ""},
		{"lost with its instance", &pborch.TaskStatus{LastStatus: "LOST", Health: "UNKNOWN"}, ViewUnhealthy, "unknown", ""},
		{"placed, not started", &pborch.TaskStatus{LastStatus: "PENDING", Health: "UNKNOWN"}, ViewLaunching, "", ""},
		{"asked to stop, still running", &pborch.TaskStatus{LastStatus: "RUNNING", Health: "UNKNOWN"}, ViewStopping, "healthy", "STOPPED"},
	} {
		tk := &pborch.Task{Instance: "i1", TaskDefinition: "ls:1", DesiredStatus: tc.desired}
		if tk.DesiredStatus == "" {
			tk.DesiredStatus = orchestrator.StatusRunning
		}
		v := TaskViewOf("ls", reportedTask(t, TaskName("ls", "i1", 1), tc.status), tk)
		st := State(groupOf(t), []InstanceView{ready("i1")}, []TaskView{v}, nil)
		if got := st.GetInstances()[0]; got.GetState() != tc.state || got.GetHealth() != tc.word {
			t.Errorf("%s: state %q health %q, want %q %q", tc.name, got.GetState(), got.GetHealth(), tc.state, tc.word)
		}
	}
}

func TestNothingPlaced(t *testing.T) {
	with := func(in InstanceView, status string) InstanceView { in.Status = status; return in }
	var many []InstanceView
	for i := range 7 {
		many = append(many, with(ready(fmt.Sprintf("n%d", i), "role=logger"), orchestrator.InstanceDown))
	}
	for _, tc := range []struct {
		name      string
		filters   []string
		instances []InstanceView
		want      string
	}{
		{"every instance of the group is down", []string{"role=logger"},
			[]InstanceView{with(ready("b", "role=logger"), orchestrator.InstanceDown), with(ready("a", "role=logger"), orchestrator.InstanceDown), ready("web", "role=web")},
			"nothing placed: no instance of the instance group (cluster default, role=logger) is ready (2 down: a, b); the version is placed on each one that becomes ready"},
		{"down and draining", []string{"role=logger"},
			[]InstanceView{with(ready("a", "role=logger"), orchestrator.InstanceDraining), with(ready("b", "role=logger"), orchestrator.InstanceDown)},
			"nothing placed: no instance of the instance group (cluster default, role=logger) is ready (1 down: b; 1 draining: a); the version is placed on each one that becomes ready"},
		{"many are named a few at a time", []string{"role=logger"}, many,
			"nothing placed: no instance of the instance group (cluster default, role=logger) is ready (7 down: n0, n1, n2, n3, n4 and 2 more); the version is placed on each one that becomes ready"},
		{"none is in the group", []string{"role=gpu", "zone in (a,b)"}, []InstanceView{ready("web", "role=web")},
			"nothing placed: no instance is in the instance group (cluster default, role=gpu, zone in (a,b)); the version is placed on each instance that joins it"},
		{"no instance at all", nil, nil,
			"nothing placed: no instance is in the instance group (cluster default); the version is placed on each instance that joins it"},
	} {
		if got := NothingPlaced(groupOf(t, tc.filters...), tc.instances); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}

// reportedTask is a stored task called name whose agent reported st.
func reportedTask(t *testing.T, name string, st *pborch.TaskStatus) *pbresource.Resource {
	t.Helper()
	payload, err := anypb.New(st)
	if err != nil {
		t.Fatal(err)
	}
	return &pbresource.Resource{Id: &pbresource.ID{Name: name}, Status: map[string]*pbresource.Status{orchestrator.TaskStatusKey: {Data: payload}}}
}
