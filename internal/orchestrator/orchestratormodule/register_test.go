package orchestratormodule

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	pbagent "trellis.dev/trellis/api/agent/v1"
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage/inmem"
)

func newRegistrar(t *testing.T) (registrar, *resource.Service) {
	t.Helper()
	reg := resource.NewRegistry()
	core.Register(reg)
	orchestrator.Register(reg)
	api := resource.NewService(resource.Config{Backend: inmem.NewBackend(), Registry: reg})
	if err := core.Bootstrap(context.Background(), api); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	return registrar{api: api, now: func() time.Time { return at }}, api
}

func registerReq(session string, left bool) *pbagent.RegisterRequest {
	return &pbagent.RegisterRequest{Instance: "i-1", Cluster: "prod", Registration: &pborch.AgentRegistration{
		Session: session, Address: "10.0.0.5:7710", Attributes: map[string]string{"os": "linux", "zone": "a"}, Left: left,
	}}
}

// Register creates the Instance (data: the cluster), writes the
// registration to status["agent"], keeps what the operator set, and
// never moves the generation once the Instance exists.
func TestRegister(t *testing.T) {
	r, api := newRegistrar(t)
	ctx := context.Background()
	resp, err := r.Register(ctx, registerReq("s1", false))
	if err != nil {
		t.Fatal(err)
	}
	if in := resp.GetInstance(); in.GetSession() != "s1" || in.GetCluster() != "prod" || in.GetStatus() != orchestrator.InstanceReady || in.GetRegisteredAt() == nil {
		t.Fatalf("registered: %v", in)
	}
	read := func() *pbresource.Resource {
		t.Helper()
		got, err := api.Read(ctx, &pbresource.ReadRequest{Id: orchestrator.InstanceID("i-1")})
		if err != nil {
			t.Fatal(err)
		}
		return got.GetResource()
	}
	stored := read()
	data, _ := resource.DecodeData[*pborch.Instance](stored)
	if data.GetSession() != "" || data.GetAddress() != "" || len(data.GetAttributes()) != 0 {
		t.Fatalf("the registration went into the data: %v", data)
	}

	// The operator drains it and sets an attribute (a generic write).
	data.Drain, data.Status, data.Attributes = true, "", map[string]string{"rack": "r1"}
	payload, _ := anypb.New(data)
	if _, err := api.Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: stored.GetId(), Version: stored.GetVersion(), Data: payload}}); err != nil {
		t.Fatal(err)
	}
	drained := read()

	// The agent restarts: a new session, one call, no proof of the old.
	resp, err = r.Register(ctx, registerReq("s2", false))
	if err != nil {
		t.Fatal(err)
	}
	in := resp.GetInstance()
	if in.GetSession() != "s2" || in.GetStatus() != orchestrator.InstanceDraining || !in.GetDrain() || in.GetAttributes()["rack"] != "r1" || in.GetAttributes()["zone"] != "a" {
		t.Fatalf("registered again: %v", in)
	}
	if got := read(); got.GetGeneration() != drained.GetGeneration() {
		t.Fatalf("generation %d after a registration, was %d", got.GetGeneration(), drained.GetGeneration())
	}

	// Leaving: left, drain kept.
	resp, err = r.Register(ctx, registerReq("s2", true))
	if err != nil {
		t.Fatal(err)
	}
	if in := resp.GetInstance(); in.GetStatus() != orchestrator.InstanceLeft || !in.GetDrain() {
		t.Fatalf("left: %v", in)
	}
}

// A Connect leaf must name the instance it registers; leaving an
// Instance an operator removed creates none; bad input names the field.
func TestRegisterRefusals(t *testing.T) {
	r, api := newRegistrar(t)
	ctx := context.Background()
	if _, err := r.Register(resource.AsAgent(ctx, "i-2"), registerReq("s1", false)); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("another instance's leaf: %v, want PermissionDenied", err)
	}
	if _, err := r.Register(resource.AsAgent(ctx, "i-1"), registerReq("s1", true)); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Read(ctx, &pbresource.ReadRequest{Id: orchestrator.InstanceID("i-1")}); status.Code(err) != codes.NotFound {
		t.Fatalf("leaving created the Instance: %v", err)
	}
	for _, req := range []*pbagent.RegisterRequest{
		{Instance: "Not_A_Name", Registration: &pborch.AgentRegistration{Session: "s1"}},
		{Instance: "i-1"},
		{Instance: "i-1", Registration: &pborch.AgentRegistration{}},
	} {
		if _, err := r.Register(ctx, req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v: %v, want InvalidArgument", req, err)
		}
	}
}
