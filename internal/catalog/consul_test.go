package catalog_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/orchestrator"
)

// A machine is a node named after it, at the host of the address its
// agent registered (without the agent's port), its attributes as meta.
func TestConsulNodesOfMachines(t *testing.T) {
	m := &pbresource.Resource{Id: orchestrator.InstanceID("i-1"), Version: "42"}
	m.Id.Uid = "u1"
	nodes := catalog.ConsulNodes("dc1", []*pbresource.Resource{m}, []*pborch.Instance{{Address: "10.0.0.5:7710", Attributes: map[string]string{"zone": "a"}}}, nil)
	if len(nodes) != 1 {
		t.Fatalf("nodes = %+v", nodes)
	}
	n := nodes[0]
	if n.Node != "i-1" || n.ID != "u1" || n.Address != "10.0.0.5" || n.TaggedAddresses["lan"] != "10.0.0.5" || n.Meta["zone"] != "a" || n.Datacenter != "dc1" || n.ModifyIndex != 42 {
		t.Fatalf("node = %+v", n)
	}
}

// An instance of a task is on its machine's node, and its checks are its
// agent's (Type trellis-task); ?passing and ?tag= select, and a check
// nobody reported leaves the instance out of ?passing.
func TestConsulEntriesOfATask(t *testing.T) {
	m := &pbresource.Resource{Id: orchestrator.InstanceID("i-1"), Version: "7"}
	si := &pbcatalog.ServiceInstance{Service: "api", Address: "172.26.64.2", Port: 8080, Instance: "i-1", Task: "api-1", Tags: []string{"v1"},
		Checks: []*pbcatalog.CheckDefinition{{Name: "api-1/app"}}}
	res := &pbresource.Resource{Id: catalog.ServiceInstanceID("default", "api-1"), Version: "9"}
	agent, _ := anypb.New(&pbcatalog.ChecksStatus{Checks: []*pbcatalog.CheckStatus{{Name: "api-1/app", Status: catalog.CheckPassing, Output: "HTTP 200"}},
		Health: catalog.CheckPassing, ReportedAt: timestamppb.New(time.Unix(100, 0))})
	res.Status = map[string]*pbresource.Status{catalog.AgentChecksStatusKey: {Data: agent}}
	ci := catalog.ConsulInstance{Resource: res, Data: si, Node: m, NodeData: &pborch.Instance{Address: "10.0.0.5:7710"}}

	got := catalog.ConsulEntries("dc1", []catalog.ConsulInstance{ci}, catalog.ConsulQuery{Passing: true, Tags: []string{"v1"}})
	if len(got) != 1 {
		t.Fatalf("entries = %+v", got)
	}
	e := got[0]
	if e.Node.Node != "i-1" || e.Node.Address != "10.0.0.5" || e.Service.ID != "api-1" || e.Service.Address != "172.26.64.2" || e.Service.Port != 8080 || e.Service.ModifyIndex != 9 {
		t.Fatalf("entry = %+v", e)
	}
	if len(e.Checks) != 1 || e.Checks[0].Node != "i-1" || e.Checks[0].Type != catalog.ConsulCheckTypeTask || e.Checks[0].Status != catalog.CheckPassing || e.Checks[0].Output != "HTTP 200" {
		t.Fatalf("checks = %+v", e.Checks)
	}
	if got := catalog.ConsulEntries("dc1", []catalog.ConsulInstance{ci}, catalog.ConsulQuery{Tags: []string{"v2"}}); len(got) != 0 {
		t.Fatalf("?tag=v2 = %+v", got)
	}
	res.Status = nil // nobody reported: critical
	if got := catalog.ConsulEntries("dc1", []catalog.ConsulInstance{ci}, catalog.ConsulQuery{Passing: true}); len(got) != 0 {
		t.Fatalf("?passing with no report = %+v", got)
	}
	if got := catalog.ConsulEntries("dc1", []catalog.ConsulInstance{ci}, catalog.ConsulQuery{}); len(got) != 1 || got[0].Checks[0].Output != catalog.NotReportedOutput {
		t.Fatalf("no report = %+v", got)
	}
}
