package orchestrator

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
)

func TestIsAgentReport(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	base := func() *pborch.Task {
		return &pborch.Task{TaskDefinition: "web:1", Instance: "i-1", StartedBy: "environment/web", DesiredStatus: "RUNNING",
			LastStatus: "PENDING", Session: "s1", ReportedAt: timestamppb.New(at), Environment: "web", Deployment: "d1"}
	}
	wrap := func(meta map[string]string, tk *pborch.Task) *pbresource.Resource {
		data, err := anypb.New(tk)
		if err != nil {
			t.Fatal(err)
		}
		return &pbresource.Resource{Id: TaskID("default", "web-1"), Metadata: meta, Data: data}
	}
	for _, tc := range []struct {
		name string
		edit func(*pborch.Task)
		uid  string
		meta map[string]string
		want bool
	}{
		{"a report: running, healthy, a new reported_at", func(tk *pborch.Task) {
			tk.LastStatus, tk.Health, tk.StartedAt, tk.ReportedAt = "RUNNING", "HEALTHY", timestamppb.New(at), timestamppb.New(at.Add(time.Second))
			tk.Containers = []*pborch.ContainerState{{Name: "app", Status: "RUNNING"}}
		}, "", nil, true},
		{"a report of another session", func(tk *pborch.Task) {
			tk.Session, tk.ReportedAt = "s2", timestamppb.New(at.Add(time.Second))
		}, "", nil, true},
		{"marked LOST by the servers: no new reported_at", func(tk *pborch.Task) {
			tk.LastStatus, tk.StopReason, tk.StoppedAt = "LOST", "instance i-1 down", timestamppb.New(at)
		}, "", nil, false},
		{"a stop asked for", func(tk *pborch.Task) { tk.DesiredStatus = "STOPPED" }, "", nil, false},
		{"a stop asked for with a report", func(tk *pborch.Task) {
			tk.DesiredStatus, tk.ReportedAt = "STOPPED", timestamppb.New(at.Add(time.Second))
		}, "", nil, false},
		{"unchanged", func(*pborch.Task) {}, "", nil, false},
		{"another incarnation", func(tk *pborch.Task) { tk.ReportedAt = timestamppb.New(at.Add(time.Second)) }, "other", nil, false},
		{"labelled", func(tk *pborch.Task) { tk.ReportedAt = timestamppb.New(at.Add(time.Second)) }, "", map[string]string{"k": "v"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prev := wrap(nil, base())
			prev.Id.Uid = "u1"
			nt := base()
			tc.edit(nt)
			next := wrap(tc.meta, nt)
			next.Id.Uid = "u1"
			if tc.uid != "" {
				next.Id.Uid = tc.uid
			}
			if got := IsAgentReport(prev, next, nt); got != tc.want {
				t.Fatalf("IsAgentReport = %v, want %v", got, tc.want)
			}
		})
	}
}
