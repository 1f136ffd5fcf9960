package orchestrator

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
)

func TestIsAgentReport(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	placed := &pborch.Task{TaskDefinition: "web:1", Instance: "i-1", StartedBy: "environment/web", DesiredStatus: "RUNNING", Environment: "web", Deployment: "d1"}
	base := func() *pborch.TaskStatus {
		return &pborch.TaskStatus{LastStatus: "PENDING", Session: "s1", ReportedAt: timestamppb.New(at)}
	}
	wrap := func(meta map[string]string, tk *pborch.Task, st *pborch.TaskStatus) *pbresource.Resource {
		data, err := anypb.New(tk)
		if err != nil {
			t.Fatal(err)
		}
		payload, err := anypb.New(st)
		if err != nil {
			t.Fatal(err)
		}
		return &pbresource.Resource{Id: TaskID("default", "web-1"), Metadata: meta, Generation: 1, Data: data,
			Status: map[string]*pbresource.Status{TaskStatusKey: {Data: payload}}}
	}
	stop := proto.Clone(placed).(*pborch.Task)
	stop.DesiredStatus = "STOPPED"
	for _, tc := range []struct {
		name string
		edit func(*pborch.TaskStatus)
		task *pborch.Task
		uid  string
		meta map[string]string
		want bool
	}{
		{"a report: running, healthy, a new reported_at", func(st *pborch.TaskStatus) {
			st.LastStatus, st.Health, st.StartedAt, st.ReportedAt = "RUNNING", "HEALTHY", timestamppb.New(at), timestamppb.New(at.Add(time.Second))
			st.Containers = []*pborch.ContainerState{{Name: "app", Status: "RUNNING"}}
		}, placed, "", nil, true},
		{"a report of another session", func(st *pborch.TaskStatus) {
			st.Session, st.ReportedAt = "s2", timestamppb.New(at.Add(time.Second))
		}, placed, "", nil, true},
		{"marked LOST by the servers: no new reported_at", func(st *pborch.TaskStatus) {
			st.LastStatus, st.StopReason, st.StoppedAt = "LOST", "instance i-1 down", timestamppb.New(at)
		}, placed, "", nil, false},
		{"a stop asked for", func(*pborch.TaskStatus) {}, stop, "", nil, false},
		{"a stop asked for with a report", func(st *pborch.TaskStatus) {
			st.ReportedAt = timestamppb.New(at.Add(time.Second))
		}, stop, "", nil, false},
		{"unchanged", func(*pborch.TaskStatus) {}, placed, "", nil, false},
		{"another incarnation", func(st *pborch.TaskStatus) { st.ReportedAt = timestamppb.New(at.Add(time.Second)) }, placed, "other", nil, false},
		{"labelled", func(st *pborch.TaskStatus) { st.ReportedAt = timestamppb.New(at.Add(time.Second)) }, placed, "", map[string]string{"k": "v"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prev := wrap(nil, placed, base())
			prev.Id.Uid = "u1"
			st := base()
			tc.edit(st)
			next := wrap(tc.meta, tc.task, st)
			next.Id.Uid = "u1"
			if tc.uid != "" {
				next.Id.Uid = tc.uid
			}
			if got := IsAgentReport(prev, next); got != tc.want {
				t.Fatalf("IsAgentReport = %v, want %v", got, tc.want)
			}
		})
	}
}

// A task with nothing reported is PENDING; a stop reason shown is the
// agent's once it has one, the stopper's before.
func TestTaskStatusOf(t *testing.T) {
	res := &pbresource.Resource{Id: TaskID("default", "t1")}
	if st := TaskStatusOf(res); st.GetLastStatus() != StatusPending || st.GetHealth() != HealthUnknown {
		t.Fatalf("a task without a report: %v, want PENDING", st)
	}
	payload, _ := anypb.New(&pborch.TaskStatus{LastStatus: StatusStopped, StopReason: "essential container app exited with code 1"})
	res.Status = map[string]*pbresource.Status{TaskStatusKey: {Data: payload}}
	st := TaskStatusOf(res)
	if st.GetLastStatus() != StatusStopped {
		t.Fatalf("status %v", st)
	}
	asked := &pborch.Task{DesiredStatus: StatusStopped, StopReason: "stopped by user"}
	if got := TaskStopReason(asked, st); got != "essential container app exited with code 1" {
		t.Errorf("stop reason %q, want the agent's", got)
	}
	if got := TaskStopReason(asked, TaskStatusOf(&pbresource.Resource{})); got != "stopped by user" {
		t.Errorf("stop reason %q before a report, want the stopper's", got)
	}
}
