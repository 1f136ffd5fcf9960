// Package meshmodule is the mesh's policy as a module of the server: the
// Intentions and MeshConfig types, the operations that write and delete
// Intentions (PUT and DELETE /v1/intentions/{destination}), and the
// controller that creates the MeshConfig when it is missing (see
// internal/mesh for the types and the decision).
package meshmodule

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	pbmesh "trellis.dev/trellis/api/mesh/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/mesh"
	"trellis.dev/trellis/internal/mesh/command"
	"trellis.dev/trellis/internal/module"
	"trellis.dev/trellis/internal/resource"
)

// ConfigControllerName names the controller that creates the MeshConfig.
const ConfigControllerName = "mesh-config"

// Config tunes the mesh's module. Its zero value is today's setting of
// every cluster.
type Config struct {
	// DefaultIntention is the default_intention the MeshConfig is created
	// with: mesh.Allow when empty, as long as ACLs allow by default (they
	// do in every cluster today, `trellis dev` included). The ACL system
	// sets mesh.Deny when it denies by default. It only shapes the
	// MeshConfig the servers create: a stored one is never changed.
	DefaultIntention mesh.Action
}

// New returns the mesh's module.
func New(cfg Config) module.Module { return meshModule{cfg: cfg} }

type meshModule struct{ cfg Config }

func (meshModule) Name() string { return "mesh" }

func (meshModule) Register(r *resource.Registry) { mesh.Register(r) }

// Commands are the mesh's commands: trellis intention (cli.Commander).
func (meshModule) Commands(c cli.CommandEnv) []*cobra.Command { return command.Commands(c.Env) }

// Setup builds the controller that creates the MeshConfig when it is
// missing, and the routes that write and delete Intentions.
func (m meshModule) Setup(d module.Deps) (module.Parts, error) {
	if _, ok := d.Registry.Resolve(core.ClusterType); !ok {
		return module.Parts{}, fmt.Errorf("needs the core's types (the cluster's identity is what makes the MeshConfig's controller run at every gain of leadership): add the core's module to the server")
	}
	def := m.cfg.DefaultIntention
	switch def {
	case "":
		def = mesh.Allow
	case mesh.Allow, mesh.Deny:
	default:
		return module.Parts{}, fmt.Errorf("default intention %q: give %q or %q", def, mesh.Allow, mesh.Deny)
	}
	ops := operations{api: d.API, reg: d.Registry}
	return module.Parts{
		Controllers: []controller.Controller{ConfigController(d.API, def)},
		Routes:      ops.routes(),
	}, nil
}

// ConfigController creates the MeshConfig, with default_intention def and
// the other defaults, whenever it is missing: at a new cluster's first
// leadership (it watches the cluster's identity, which the bootstrap
// stores, so it runs at every gain of leadership) and should it ever be
// gone. It never changes a stored one.
func ConfigController(api resource.API, def mesh.Action) controller.Controller {
	toConfig := func(controller.Event, controller.Lookup) []controller.Request {
		return []controller.Request{{ID: mesh.MeshConfigID()}}
	}
	return controller.Controller{
		Name:        ConfigControllerName,
		ManagedType: mesh.MeshConfigType,
		Watches: []controller.Watch{
			{Type: mesh.MeshConfigType, Map: toConfig},
			{Type: core.ClusterType, Map: toConfig},
		},
		Reconciler: controller.ReconcileFunc(func(ctx context.Context, _ controller.Request) error {
			return EnsureConfig(resource.AsController(resource.FromOperations(ctx), ConfigControllerName), api, def)
		}),
		Workers: 1,
	}
}

// EnsureConfig creates the MeshConfig with default_intention def unless
// one is stored. The write is create-only, so a MeshConfig written in
// between is kept.
func EnsureConfig(ctx context.Context, api resource.API, def mesh.Action) error {
	_, err := api.Read(ctx, &pbresource.ReadRequest{Id: mesh.MeshConfigID(), Consistent: true})
	if err == nil {
		return nil
	}
	if status.Code(err) != codes.NotFound {
		return fmt.Errorf("read the mesh config: %w", err)
	}
	data, err := anypb.New(&pbmesh.MeshConfig{DefaultIntention: string(def)})
	if err != nil {
		return err
	}
	_, err = api.Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: mesh.MeshConfigID(), Version: resource.CreateOnly, Data: data}})
	if status.Code(err) == codes.Aborted {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create the mesh config: %w", err)
	}
	return nil
}
