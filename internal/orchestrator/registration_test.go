package orchestrator

import (
	"maps"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
)

// MergeRegistration: the agent's registration over the operator's data;
// without one (a store written before status["agent"]) the data reads as
// it is.
func TestMergeRegistration(t *testing.T) {
	at := timestamppb.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	reg := &pborch.AgentRegistration{
		Session: "s2", RegisteredAt: at, AgentVersion: "v2", Address: "10.0.0.5:7710",
		Resources: &pborch.Resources{CpuMillis: 4000}, Drivers: []*pborch.DriverInfo{{Name: "exec", Available: true}},
		Attributes: map[string]string{"os": "linux", "zone": "a"},
	}
	left := proto.Clone(reg).(*pborch.AgentRegistration)
	left.Left = true
	oldFormat := &pborch.Instance{
		Cluster: "prod", Status: InstanceReady, Session: "s1", RegisteredAt: timestamppb.New(time.Unix(1, 0)),
		AgentVersion: "v1", Address: "old:1", Attributes: map[string]string{"os": "plan9", "zone": "b", "rack": "r1"},
	}
	operator := &pborch.Instance{Cluster: "prod", Status: InstanceDraining, Drain: true, Attributes: map[string]string{"rack": "r1", "zone": "b"}}
	registered := func(base *pborch.Instance, status string) *pborch.Instance {
		return &pborch.Instance{
			Cluster: "prod", Status: status, Drain: base.GetDrain(), Session: "s2", RegisteredAt: at, AgentVersion: "v2",
			Address: "10.0.0.5:7710", Resources: reg.GetResources(), Drivers: reg.GetDrivers(),
			Attributes: map[string]string{"os": "linux", "zone": "a", "rack": "r1"},
		}
	}
	for _, tc := range []struct {
		name string
		in   *pborch.Instance
		reg  *pborch.AgentRegistration
		want *pborch.Instance
	}{
		{"old store, no registration: the data as it is", oldFormat, nil, oldFormat},
		{"old store, registered since: the registration wins, stale built-ins go", oldFormat, reg, registered(oldFormat, InstanceReady)},
		{"operator's data: drain kept, draining", operator, reg, registered(operator, InstanceDraining)},
		{"left", operator, left, registered(operator, InstanceLeft)},
		{"left in the data (older agents): left until Register clears it", &pborch.Instance{Cluster: "prod", Status: InstanceLeft, Session: "s1", Attributes: map[string]string{"rack": "r1"}}, reg,
			registered(&pborch.Instance{}, InstanceLeft)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := proto.Clone(tc.in)
			got := MergeRegistration(tc.in, tc.reg)
			if !proto.Equal(got, tc.want) {
				t.Fatalf("MergeRegistration =\n%v\nwant\n%v", got, tc.want)
			}
			if !proto.Equal(tc.in, before) {
				t.Fatalf("MergeRegistration changed its input: %v", tc.in)
			}
		})
	}
}

// InstanceOf overlays the registration, then the down verdict, which
// holds over the session registered in status["agent"].
func TestInstanceOfRegistration(t *testing.T) {
	at := timestamppb.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	data := &pborch.Instance{Cluster: "default", Status: InstanceReady}
	regAny, _ := anypb.New(&pborch.AgentRegistration{Session: "s1", RegisteredAt: at})
	res := &pbresource.Resource{Id: InstanceID("i-1"), Status: map[string]*pbresource.Status{AgentStatusKey: {Data: regAny}}}
	if got := InstanceOf(res, data); got.GetSession() != "s1" || got.GetStatus() != InstanceReady || !SessionHolds(got, "s1") {
		t.Fatalf("registered: %v", got)
	}
	downAny, _ := anypb.New(&pborch.InstanceDown{Session: "s1", DownSince: at})
	res.Status[DownStatusKey] = &pbresource.Status{Data: downAny}
	if got := InstanceOf(res, data); got.GetStatus() != InstanceDown {
		t.Fatalf("down over the registered session: %v", got)
	}
	regAny, _ = anypb.New(&pborch.AgentRegistration{Session: "s2", RegisteredAt: at})
	res.Status[AgentStatusKey] = &pbresource.Status{Data: regAny}
	if got := InstanceOf(res, data); got.GetStatus() != InstanceReady || SessionHolds(got, "s1") || !SessionHolds(got, "s2") {
		t.Fatalf("registered again: %v", got)
	}
}

// No write of an Instance's data sets data.session, a create or not:
// the refusal names the field and Register. What an older store kept of
// a registration in the data, Register takes out.
func TestInstanceSessionIsNotData(t *testing.T) {
	for _, in := range []*pborch.Instance{{Cluster: "default", Status: InstanceReady, Session: "mine"}, {Cluster: "default", Status: InstanceDraining, Drain: true, Session: "s1"}} {
		data, err := anypb.New(in)
		if err != nil {
			t.Fatal(err)
		}
		err = ValidateInstance(&pbresource.Resource{Id: InstanceID("i-1"), Data: data})
		if err == nil || !strings.Contains(err.Error(), "data.session") || !strings.Contains(err.Error(), "AgentService.Register") {
			t.Errorf("%v: %v, want a refusal naming data.session and Register", in, err)
		}
	}
	old := &pborch.Instance{Cluster: "default", Session: "s1", Address: "10.0.0.1:7710", AgentVersion: "0.1", Drivers: []*pborch.DriverInfo{{}},
		Attributes: map[string]string{"rack": "r1", "os": "linux"}}
	got := WithoutRegistration(old)
	if got.GetSession() != "" || got.GetAddress() != "" || got.GetAgentVersion() != "" || got.GetDrivers() != nil || !maps.Equal(got.GetAttributes(), map[string]string{"rack": "r1"}) {
		t.Errorf("WithoutRegistration: %v", got)
	}
	if old.GetSession() != "s1" || len(old.GetAttributes()) != 2 {
		t.Errorf("WithoutRegistration changed its input: %v", old)
	}
}

func TestValidateAgentRegistration(t *testing.T) {
	if err := ValidateAgentRegistration(&pborch.AgentRegistration{RegisteredAt: timestamppb.Now()}); err == nil {
		t.Error("a registration without a session accepted")
	}
}
