package healthsync

import (
	"context"

	"google.golang.org/grpc"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/agent/component"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/ids"
)

// Catalog is what health-sync asks of the servers: the service instances
// of a task (those it owns), and the batched write of their checks.
type Catalog interface {
	// InstancesOf lists the ServiceInstances owned by the task id.
	InstancesOf(ctx context.Context, task *pbresource.ID) ([]*pbresource.Resource, error)
	// WriteStatuses is the resource service's, as the agent.
	WriteStatuses(ctx context.Context, req *pbresource.WriteStatusesRequest) (*pbresource.WriteStatusesResponse, error)
}

// ServersCatalog is the Catalog over the agent's link to the servers, as
// the agent (so that it may write the status key it owns).
func ServersCatalog(s component.Servers) Catalog { return serversCatalog{s} }

type serversCatalog struct{ s component.Servers }

func (c serversCatalog) InstancesOf(ctx context.Context, task *pbresource.ID) ([]*pbresource.Resource, error) {
	var out []*pbresource.Resource
	err := c.s.Call(ctx, func(ctx context.Context, cc grpc.ClientConnInterface) error {
		resp, err := pbresource.NewResourceServiceClient(cc).ListByOwner(ctx, &pbresource.ListByOwnerRequest{Owner: task})
		if err != nil {
			return err
		}
		out = OwnedInstances(resp.GetResources())
		return nil
	})
	return out, err
}

func (c serversCatalog) WriteStatuses(ctx context.Context, req *pbresource.WriteStatusesRequest) (*pbresource.WriteStatusesResponse, error) {
	var out *pbresource.WriteStatusesResponse
	err := c.s.Call(ctx, func(ctx context.Context, cc grpc.ClientConnInterface) error {
		var err error
		out, err = pbresource.NewResourceServiceClient(cc).WriteStatuses(ctx, req)
		return err
	})
	return out, err
}

// OwnedInstances keeps the ServiceInstances of what a task owns.
func OwnedInstances(owned []*pbresource.Resource) []*pbresource.Resource {
	var out []*pbresource.Resource
	for _, r := range owned {
		if ids.SameType(r.GetId().GetType(), catalog.ServiceInstanceType) {
			out = append(out, r)
		}
	}
	return out
}
