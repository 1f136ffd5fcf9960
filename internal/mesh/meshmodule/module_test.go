package meshmodule_test

import (
	"context"
	"testing"

	"google.golang.org/protobuf/types/known/anypb"

	pbmesh "trellis.dev/trellis/api/mesh/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/mesh"
	"trellis.dev/trellis/internal/mesh/meshmodule"
	"trellis.dev/trellis/internal/module"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage/inmem"
)

func newAPI(t *testing.T) (*resource.Service, *resource.Registry) {
	reg := resource.NewRegistry()
	core.Register(reg)
	meshmodule.New(meshmodule.Config{}).Register(reg)
	return resource.NewService(resource.Config{Backend: inmem.NewBackend(), Registry: reg}), reg
}

func readConfig(t *testing.T, api resource.API) (*pbmesh.MeshConfig, string) {
	t.Helper()
	out, err := api.Read(context.Background(), &pbresource.ReadRequest{Id: mesh.MeshConfigID()})
	if err != nil {
		t.Fatal(err)
	}
	c, err := resource.DecodeData[*pbmesh.MeshConfig](out.GetResource())
	if err != nil {
		t.Fatal(err)
	}
	return c, out.GetResource().GetVersion()
}

// EnsureConfig creates the MeshConfig with the default given, and never
// changes one stored.
func TestEnsureConfig(t *testing.T) {
	api, _ := newAPI(t)
	ctx := resource.FromOperations(context.Background())
	if err := meshmodule.EnsureConfig(ctx, api, mesh.Allow); err != nil {
		t.Fatal(err)
	}
	c, v := readConfig(t, api)
	if mesh.DefaultActionOf(c) != mesh.Allow || c.GetMtlsMode() != mesh.MTLSStrict {
		t.Fatalf("created %v, want default_intention allow and the defaults", c)
	}
	// A person's change stays.
	data, _ := anypb.New(&pbmesh.MeshConfig{DefaultIntention: "deny"})
	if _, err := api.Write(context.Background(), &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: mesh.MeshConfigID(), Data: data}}); err != nil {
		t.Fatal(err)
	}
	if err := meshmodule.EnsureConfig(ctx, api, mesh.Allow); err != nil {
		t.Fatal(err)
	}
	if c, v2 := readConfig(t, api); mesh.DefaultActionOf(c) != mesh.Deny || v2 == v {
		t.Fatalf("after a change to deny and another ensure: %v (version %s)", c, v2)
	}
}

// The module refuses a default that is no action, and gives one
// controller whose reconcile creates the MeshConfig with the default the
// module was configured with.
func TestModuleSetup(t *testing.T) {
	api, reg := newAPI(t)
	if _, err := meshmodule.New(meshmodule.Config{DefaultIntention: "maybe"}).Setup(module.Deps{API: api, Registry: reg}); err == nil {
		t.Fatal("a default intention of \"maybe\" was taken")
	}
	parts, err := meshmodule.New(meshmodule.Config{DefaultIntention: mesh.Deny}).Setup(module.Deps{API: api, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	if err := parts.Check(); err != nil {
		t.Fatal(err)
	}
	if len(parts.Controllers) != 1 {
		t.Fatalf("%d controllers, want 1", len(parts.Controllers))
	}
	c := parts.Controllers[0]
	if err := c.Reconciler.Reconcile(context.Background(), c.Watches[0].Map(controller.Event{}, nil)[0]); err != nil {
		t.Fatal(err)
	}
	if got, _ := readConfig(t, api); mesh.DefaultActionOf(got) != mesh.Deny {
		t.Fatalf("created %v, want default_intention deny", got)
	}
}
