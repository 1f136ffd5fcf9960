package orchestrator

import (
	"strings"
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

// MergeTaskStatus: the servers' verdict holds over the report it was made
// over and no later one.
func TestMergeTaskStatus(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ts := func(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(at.Add(d)) }
	running := &pborch.TaskStatus{LastStatus: StatusRunning, Health: HealthHealthy, StartedAt: ts(0), ReportedAt: ts(time.Second),
		Containers: []*pborch.ContainerState{{Name: "app", Status: StatusRunning}}}
	lostOver := func(reported *timestamppb.Timestamp) *pborch.TaskLost {
		return &pborch.TaskLost{Reason: "instance i-1 down: no heartbeat for 10s", LostAt: ts(time.Minute), ReportedAt: reported}
	}
	lostView := proto.Clone(running).(*pborch.TaskStatus)
	lostView.LastStatus, lostView.StopReason, lostView.StoppedAt = StatusLost, "instance i-1 down: no heartbeat for 10s", ts(time.Minute)
	pendingLost := &pborch.TaskStatus{LastStatus: StatusLost, Health: HealthUnknown, StopReason: "instance i-1 down: no heartbeat for 10s", StoppedAt: ts(time.Minute)}
	for _, tc := range []struct {
		name  string
		agent *pborch.TaskStatus
		lost  *pborch.TaskLost
		want  *pborch.TaskStatus
	}{
		{"nothing: pending", nil, nil, pendingStatus},
		{"a report alone", running, nil, running},
		{"lost over the latest report: LOST, containers kept", running, lostOver(ts(time.Second)), lostView},
		{"lost over an earlier report: the agent's report since wins", running, lostOver(ts(0)), running},
		{"lost before any report, none since", nil, lostOver(nil), pendingLost},
		{"lost before any report, a report since", running, lostOver(nil), running},
		{"lost over a report, and the report gone", nil, lostOver(ts(time.Second)), pendingStatus},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before *pborch.TaskStatus
			if tc.agent != nil {
				before = proto.Clone(tc.agent).(*pborch.TaskStatus)
			}
			got := MergeTaskStatus(tc.agent, tc.lost)
			if !proto.Equal(got, tc.want) {
				t.Fatalf("MergeTaskStatus = %v, want %v", got, tc.want)
			}
			if tc.agent != nil && !proto.Equal(tc.agent, before) {
				t.Fatalf("MergeTaskStatus changed the agent's report: %v", tc.agent)
			}
		})
	}
}

// TaskStatusOf merges the two keys a stored task carries; a lost verdict
// is not an agent's report.
func TestTaskStatusOfMergesTheLostVerdict(t *testing.T) {
	at := timestamppb.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	report, _ := anypb.New(&pborch.TaskStatus{LastStatus: StatusRunning, ReportedAt: at})
	verdict, _ := anypb.New(&pborch.TaskLost{Reason: "instance i-1 down", LostAt: at, ReportedAt: at})
	prev := &pbresource.Resource{Id: TaskID("default", "t1"), Status: map[string]*pbresource.Status{TaskStatusKey: {Data: report}}}
	next := &pbresource.Resource{Id: TaskID("default", "t1"), Status: map[string]*pbresource.Status{TaskStatusKey: {Data: report}, LostStatusKey: {Data: verdict}}}
	if st := TaskStatusOf(next); st.GetLastStatus() != StatusLost || st.GetStopReason() != "instance i-1 down" {
		t.Fatalf("TaskStatusOf = %v, want LOST with the verdict's reason", st)
	}
	if AgentStatusOf(next).GetLastStatus() != StatusRunning {
		t.Fatalf("AgentStatusOf = %v, want the agent's RUNNING", AgentStatusOf(next))
	}
	if IsAgentReport(prev, next) {
		t.Fatal("a lost verdict taken for an agent's report")
	}
}

func TestValidateTaskLost(t *testing.T) {
	at := timestamppb.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	for _, tc := range []struct {
		name string
		lost *pborch.TaskLost
		want string
	}{
		{"valid", &pborch.TaskLost{Reason: "instance i-1 down", LostAt: at}, ""},
		{"no reason", &pborch.TaskLost{LostAt: at}, "reason: is required"},
		{"no time", &pborch.TaskLost{Reason: "instance i-1 down"}, "lost_at: is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateTaskLost(tc.lost)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("ValidateTaskLost = %v, want %q", err, tc.want)
			}
		})
	}
}
