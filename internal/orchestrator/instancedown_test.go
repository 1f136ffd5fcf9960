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

// MergeInstance: the servers' down verdict holds over the session it
// judged, on a ready or draining instance, and no later session.
func TestMergeInstance(t *testing.T) {
	at := timestamppb.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	in := func(status, session string, drain bool) *pborch.Instance {
		return &pborch.Instance{Cluster: "default", Status: status, Session: session, Drain: drain, Attributes: map[string]string{"zone": "a"}}
	}
	with := func(i *pborch.Instance, status string) *pborch.Instance {
		out := proto.Clone(i).(*pborch.Instance)
		out.Status, out.DownSince = status, at
		return out
	}
	down := &pborch.InstanceDown{Session: "s1", DownSince: at}
	for _, tc := range []struct {
		name string
		in   *pborch.Instance
		down *pborch.InstanceDown
		want *pborch.Instance
	}{
		{"no verdict", in(InstanceReady, "s1", false), nil, in(InstanceReady, "s1", false)},
		{"down over its session", in(InstanceReady, "s1", false), down, with(in(InstanceReady, "s1", false), InstanceDown)},
		{"drained while down: still down, drain kept", in(InstanceDraining, "s1", true), down, with(in(InstanceDraining, "s1", true), InstanceDown)},
		{"registered again: ready, down_since kept", in(InstanceReady, "s2", false), down, with(in(InstanceReady, "s2", false), InstanceReady)},
		{"left: stays left", in(InstanceLeft, "s1", false), down, with(in(InstanceLeft, "s1", false), InstanceLeft)},
		{"down in data (older servers): as it is", in(InstanceDown, "s1", false), down, with(in(InstanceDown, "s1", false), InstanceDown)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := proto.Clone(tc.in)
			got := MergeInstance(tc.in, tc.down)
			if !proto.Equal(got, tc.want) {
				t.Fatalf("MergeInstance = %v, want %v", got, tc.want)
			}
			if !proto.Equal(tc.in, before) {
				t.Fatalf("MergeInstance changed its input: %v", tc.in)
			}
		})
	}
}

// InstanceOf reads the verdict from the resource's status; without one
// it returns the data itself.
func TestInstanceOf(t *testing.T) {
	at := timestamppb.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	data := &pborch.Instance{Status: InstanceReady, Session: "s1"}
	res := &pbresource.Resource{Id: InstanceID("i-1")}
	if got := InstanceOf(res, data); got != data {
		t.Fatalf("without a verdict: a copy, %v", got)
	}
	payload, _ := anypb.New(&pborch.InstanceDown{Session: "s1", DownSince: at})
	res.Status = map[string]*pbresource.Status{DownStatusKey: {Data: payload}}
	if got := InstanceOf(res, data); got.GetStatus() != InstanceDown || !proto.Equal(got.GetDownSince(), at) {
		t.Fatalf("with a verdict: %v", got)
	}
	if err := ValidateInstanceDown(&pborch.InstanceDown{Session: "s1"}); err == nil {
		t.Fatal("a verdict without down_since accepted")
	}
}
