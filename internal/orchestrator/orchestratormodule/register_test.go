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
	"trellis.dev/trellis/internal/storage"
	"trellis.dev/trellis/internal/storage/inmem"
)

// commits counts the storage writes (a commit each: one Raft entry on a
// cluster).
type commits struct {
	storage.Backend
	n int
}

func (c *commits) WriteCAS(ctx context.Context, res *pbresource.Resource) (*pbresource.Resource, error) {
	c.n++
	return c.Backend.WriteCAS(ctx, res)
}

func (c *commits) WriteBatch(ctx context.Context, res []*pbresource.Resource, compares ...*pbresource.Compare) ([]*pbresource.Resource, error) {
	c.n++
	return c.Backend.WriteBatch(ctx, res, compares...)
}

func newRegistrar(t *testing.T) (registrar, *resource.Service) {
	r, api, _ := newCountedRegistrar(t)
	return r, api
}

func newCountedRegistrar(t *testing.T) (registrar, *resource.Service, *commits) {
	t.Helper()
	reg := resource.NewRegistry()
	core.Register(reg)
	orchestrator.Register(reg)
	backend := &commits{Backend: inmem.NewBackend()}
	api := resource.NewService(resource.Config{Backend: backend, Registry: reg})
	if err := core.Bootstrap(context.Background(), api); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	return registrar{api: api, now: func() time.Time { return at }}, api, backend
}

func registerReq(session string, left bool) *pbagent.RegisterRequest {
	return &pbagent.RegisterRequest{Instance: "i-1", Cluster: "prod", Registration: &pborch.AgentRegistration{
		Session: session, Address: "10.0.0.5:7710", Attributes: map[string]string{"os": "linux", "zone": "a"}, Left: left,
	}}
}

// Register creates the Instance (data: the cluster) with the
// registration in status["agent"] in one commit, so that watchers see a
// new instance once, registered; it keeps what the operator set, and
// never moves the generation once the Instance exists.
func TestRegister(t *testing.T) {
	r, api, backend := newCountedRegistrar(t)
	ctx := context.Background()
	backend.n = 0
	resp, err := r.Register(ctx, registerReq("s1", false))
	if err != nil {
		t.Fatal(err)
	}
	if backend.n != 1 {
		t.Fatalf("the first registration took %d commits, want 1", backend.n)
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

	// The agent restarts: a new session, one call, no proof of the old,
	// one commit.
	backend.n = 0
	resp, err = r.Register(ctx, registerReq("s2", false))
	if err != nil {
		t.Fatal(err)
	}
	if backend.n != 1 {
		t.Fatalf("registering again took %d commits, want 1", backend.n)
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
