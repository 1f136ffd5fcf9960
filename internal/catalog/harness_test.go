package catalog_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage/inmem"
)

// world is the real resource service, in memory, with the core's, the
// orchestrator's and the catalog's types.
type world struct {
	t   *testing.T
	ctx context.Context
	api *resource.Service
}

func newWorld(t *testing.T) *world {
	t.Helper()
	reg := resource.NewRegistry()
	core.Register(reg)
	orchestrator.Register(reg)
	catalog.Register(reg)
	api := resource.NewService(resource.Config{Backend: inmem.NewBackend(), Registry: reg})
	ctx := context.Background()
	if err := core.Bootstrap(ctx, api); err != nil {
		t.Fatal(err)
	}
	return &world{t: t, ctx: ctx, api: api}
}

// task writes a task called name on instance and returns its id (uid
// included).
func (w *world) task(name, instance string) *pbresource.ID {
	w.t.Helper()
	data, _ := anypb.New(&pborch.Task{TaskDefinition: "web:1", Instance: instance, StartedBy: "test"})
	out, err := w.api.Write(w.ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: orchestrator.TaskID("default", name), Data: data}})
	if err != nil {
		w.t.Fatal(err)
	}
	return out.GetResource().GetId()
}

// write writes m as the resource id, owned by owner (nil: none).
func (w *world) write(id, owner *pbresource.ID, m proto.Message) (*pbresource.Resource, error) {
	data, err := anypb.New(m)
	if err != nil {
		w.t.Fatal(err)
	}
	out, err := w.api.Write(w.ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: id, Owner: owner, Data: data}})
	return out.GetResource(), err
}

func (w *world) read(id *pbresource.ID) *pbresource.Resource {
	w.t.Helper()
	out, err := w.api.Read(w.ctx, &pbresource.ReadRequest{Id: id})
	if err != nil {
		w.t.Fatal(err)
	}
	return out.GetResource()
}

func (w *world) absent(id *pbresource.ID) bool {
	_, err := w.api.Read(w.ctx, &pbresource.ReadRequest{Id: id})
	return status.Code(err) == codes.NotFound
}

// writeChecks writes a ChecksStatus under key of the instance id, in ctx
// (who the writer is).
func (w *world) writeChecks(ctx context.Context, id *pbresource.ID, key string, cs *pbcatalog.ChecksStatus) error {
	data, err := anypb.New(cs)
	if err != nil {
		w.t.Fatal(err)
	}
	_, err = w.api.WriteStatus(ctx, &pbresource.WriteStatusRequest{Id: id, Key: key, Status: &pbresource.Status{Data: data}})
	return err
}
