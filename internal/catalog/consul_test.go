package catalog_test

import (
	"testing"

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
