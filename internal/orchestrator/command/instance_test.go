package command

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
)

// `trellis instance remove-attribute` removes an operator's attribute and
// refuses, naming the flag, one the instance's agent sets (its
// -attribute flags, in its registration), changing nothing.
func TestRemoveAttributeOfTheAgent(t *testing.T) {
	api, addr := testServer(t)
	res := store(t, api, orchestrator.InstanceID("i1"), &pborch.Instance{Cluster: "default", Status: orchestrator.InstanceReady, Attributes: map[string]string{"rack": "r1"}})
	reg, err := anypb.New(&pborch.AgentRegistration{Session: "s1", RegisteredAt: timestamppb.Now(), Attributes: map[string]string{"zone": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := api.WriteStatus(resource.AsAgent(context.Background(), "i1"), &pbresource.WriteStatusRequest{Id: res.GetId(), Key: orchestrator.AgentStatusKey, Status: &pbresource.Status{Data: reg}}); err != nil {
		t.Fatal(err)
	}
	instance := func(args ...string) (string, error) {
		return runTrellis(addr, newInstanceCmd, append([]string{"instance"}, args...)...)
	}
	if _, err := instance("remove-attribute", "i1", "zone"); err == nil || !strings.Contains(err.Error(), `attribute "zone" of instance i1 is set by its agent (trellis agent -attribute zone=...)`) {
		t.Fatalf("removing the agent's attribute: %v", err)
	}
	if out, err := instance("remove-attribute", "i1", "rack"); err != nil || !strings.Contains(out, "instance i1: removed rack") {
		t.Fatalf("removing the operator's attribute: %q %v", out, err)
	}
	got, err := api.Read(context.Background(), &pbresource.ReadRequest{Id: orchestrator.InstanceID("i1")})
	if err != nil {
		t.Fatal(err)
	}
	data, err := resource.DecodeData[*pborch.Instance](got.GetResource())
	if err != nil {
		t.Fatal(err)
	}
	if in := orchestrator.InstanceOf(got.GetResource(), data); in.GetAttributes()["zone"] != "a" || in.GetAttributes()["rack"] != "" {
		t.Fatalf("attributes after: %v", in.GetAttributes())
	}
}
