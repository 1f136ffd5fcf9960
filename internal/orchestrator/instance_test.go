package orchestrator_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/anypb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/orchestrator"
)

func instanceResource(t *testing.T, in *pborch.Instance) *pbresource.Resource {
	t.Helper()
	data, err := anypb.New(in)
	if err != nil {
		t.Fatal(err)
	}
	return &pbresource.Resource{Id: orchestrator.InstanceID("i-1"), Data: data}
}

func TestInstanceDefaults(t *testing.T) {
	res := instanceResource(t, &pborch.Instance{Drain: true})
	if err := orchestrator.MutateInstance(res); err != nil {
		t.Fatal(err)
	}
	var in pborch.Instance
	if err := res.GetData().UnmarshalTo(&in); err != nil {
		t.Fatal(err)
	}
	if in.Cluster != "default" || in.Status != "draining" {
		t.Fatalf("defaults: %v", &in)
	}
	if err := orchestrator.ValidateInstance(res); err != nil {
		t.Fatal(err)
	}
}

func TestInstanceRefusals(t *testing.T) {
	for _, c := range []struct {
		in   *pborch.Instance
		want string
	}{
		{&pborch.Instance{Cluster: "Prod", Status: "ready"}, `data.cluster: "Prod" is not a valid name`},
		{&pborch.Instance{Cluster: "c", Status: "gone"}, `data.status: "gone" is not a status`},
		{&pborch.Instance{Cluster: "c", Status: "ready", Drain: true}, `data.status: cannot be ready while drain is set`},
		{&pborch.Instance{Cluster: "c", Status: "ready", Attributes: map[string]string{"-zone": "a"}}, `data.attributes[-zone]: "-zone" is not a valid attribute key`},
		{&pborch.Instance{Cluster: "c", Status: "ready", Attributes: map[string]string{"": "a"}}, `data.attributes: an attribute key cannot be empty`},
	} {
		err := orchestrator.ValidateInstance(instanceResource(t, c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want %q", c.in, err, c.want)
		}
	}
}

func TestInstanceStatus(t *testing.T) {
	for _, c := range []struct {
		left, down, drain bool
		want              string
	}{
		{false, false, false, "ready"},
		{false, false, true, "draining"},
		{false, true, true, "down"},
		{true, true, true, "left"},
	} {
		if got := orchestrator.InstanceStatus(c.left, c.down, c.drain); got != c.want {
			t.Errorf("InstanceStatus(%v, %v, %v) = %q, want %q", c.left, c.down, c.drain, got, c.want)
		}
	}
}

func TestTaskValidation(t *testing.T) {
	task := func(edit func(*pborch.Task)) *pbresource.Resource {
		tk := &pborch.Task{TaskDefinition: "web:1", Instance: "i-1", StartedBy: "alice"}
		edit(tk)
		data, _ := anypb.New(tk)
		res := &pbresource.Resource{Id: orchestrator.TaskID("default", "t1"), Data: data}
		if err := orchestrator.MutateTask(res); err != nil {
			t.Fatal(err)
		}
		return res
	}
	if err := orchestrator.ValidateTask(task(func(*pborch.Task) {})); err != nil {
		t.Fatalf("a plain task is refused: %v", err)
	}
	for _, c := range []struct {
		edit func(*pborch.Task)
		want string
	}{
		{func(tk *pborch.Task) { tk.TaskDefinition = "web" }, `data.task_definition: "web" names no revision`},
		{func(tk *pborch.Task) { tk.TaskDefinition = "web:x" }, `data.task_definition: "web:x" is not family:revision`},
		{func(tk *pborch.Task) { tk.Instance = "" }, `data.instance: is required`},
		{func(tk *pborch.Task) { tk.DesiredStatus = "PAUSED" }, `data.desired_status: "PAUSED" is not RUNNING or STOPPED`},
		{func(tk *pborch.Task) { tk.Replaces = "t0" }, `data.replaces: names task "t0", but only a task of an environment replaces another`},
		{func(tk *pborch.Task) { tk.Environment, tk.Replaces = "logs", "T_0" }, `data.replaces: `},
		{func(tk *pborch.Task) { tk.Environment, tk.Replaces = "logs", "t1" }, `data.replaces: names the task itself`},
	} {
		if err := orchestrator.ValidateTask(task(c.edit)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want %q", err, c.want)
		}
	}
}

// What an agent reports is checked as the payload of status["agent"].
func TestTaskStatusValidation(t *testing.T) {
	if err := orchestrator.ValidateTaskStatus(&pborch.TaskStatus{LastStatus: "RUNNING", Health: "HEALTHY"}); err != nil {
		t.Fatalf("a plain report is refused: %v", err)
	}
	for _, c := range []struct {
		st   *pborch.TaskStatus
		want string
	}{
		{&pborch.TaskStatus{LastStatus: "DONE"}, `last_status: "DONE" is not one of`},
		{&pborch.TaskStatus{LastStatus: "RUNNING", Health: "FINE"}, `health: "FINE" is not one of`},
		{&pborch.TaskStatus{LastStatus: "RUNNING", Containers: []*pborch.ContainerState{{Name: "app", Status: "UP"}}}, `containers[0].status: "UP" is not one of`},
	} {
		if err := orchestrator.ValidateTaskStatus(c.st); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want %q", err, c.want)
		}
	}
}

func TestTaskUpdates(t *testing.T) {
	task := func(edit func(*pborch.Task)) *pbresource.Resource {
		tk := &pborch.Task{TaskDefinition: "web:1", Instance: "i-1", StartedBy: "alice", DesiredStatus: "RUNNING"}
		edit(tk)
		data, _ := anypb.New(tk)
		return &pbresource.Resource{Id: orchestrator.TaskID("default", "t1"), Data: data}
	}
	stored := task(func(*pborch.Task) {})
	for _, ok := range []func(*pborch.Task){
		func(tk *pborch.Task) { tk.DesiredStatus = "STOPPED" },
		func(tk *pborch.Task) { tk.DesiredStatus, tk.StopReason = "STOPPED", "stopped by user: done" },
	} {
		if err := orchestrator.ValidateTaskUpdate(stored, task(ok)); err != nil {
			t.Errorf("a legal update is refused: %v", err)
		}
	}
	stopped := task(func(tk *pborch.Task) { tk.DesiredStatus = "STOPPED" })
	for _, c := range []struct {
		from *pbresource.Resource
		edit func(*pborch.Task)
		want string
	}{
		{stored, func(tk *pborch.Task) { tk.Instance = "i-2" }, `data.instance: cannot change from "i-1" to "i-2": task t1 is placed`},
		{stored, func(tk *pborch.Task) { tk.TaskDefinition = "web:2" }, `data.task_definition: cannot change from "web:1" to "web:2"`},
		{stored, func(tk *pborch.Task) { tk.StartedBy = "bob" }, `data.started_by: cannot change`},
		{stored, func(tk *pborch.Task) { tk.Replaces = "t0" }, `data.replaces: cannot change from "" to "t0"`},
		{stopped, func(tk *pborch.Task) {}, `data.desired_status: cannot go back to RUNNING: task t1 was asked to stop`},
	} {
		if err := orchestrator.ValidateTaskUpdate(c.from, task(c.edit)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want %q", err, c.want)
		}
	}
}
