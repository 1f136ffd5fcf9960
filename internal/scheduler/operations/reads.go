package operations

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pbresource "trellis.dev/trellis/api/resource/v1"
	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/scheduler"
)

func (o *Operations) readEnvironment(ctx context.Context, ns, name string) (*pbresource.Resource, *pbscheduler.Environment, error) {
	if err := resource.ValidateName("name", name); err != nil {
		return nil, nil, err
	}
	return readOne[*pbscheduler.Environment](ctx, o.API, scheduler.EnvironmentID(ns, name), "environment")
}

// readDeployment reads a deployment of environment name, as readers see
// it (scheduler.DeploymentOf), with the resource as stored.
func (o *Operations) readDeployment(ctx context.Context, ns, name, id string) (*pbresource.Resource, *pbscheduler.Deployment, error) {
	if err := resource.ValidateName("deployment", id); err != nil {
		return nil, nil, err
	}
	res, d, err := readOne[*pbscheduler.Deployment](ctx, o.API, scheduler.DeploymentID(ns, id), "deployment")
	if err != nil {
		return nil, nil, err
	}
	d = scheduler.DeploymentOf(res, d)
	if d.GetEnvironment() != name {
		return nil, nil, status.Errorf(codes.NotFound, "deployment %s is one of environment %s, not %s", id, d.GetEnvironment(), name)
	}
	return res, d, nil
}

// owned lists the versions or deployments of an environment with a
// strong read.
func (o *Operations) owned(ctx context.Context, env *pbresource.Resource, typ *pbresource.Type) ([]*pbresource.Resource, error) {
	return scheduler.ListOwned(ctx, o.API, env, typ, true)
}

func (o *Operations) deployments(ctx context.Context, env *pbresource.Resource) ([]*scheduler.StoredDeployment, error) {
	owned, err := o.owned(ctx, env, scheduler.DeploymentType)
	if err != nil {
		return nil, err
	}
	return scheduler.DecodeDeployments(owned), nil
}

// conflictf turns a CAS failure into a conflict that says what to do.
func conflictf(err error, format string, args ...any) error {
	if status.Code(err) == codes.Aborted {
		return status.Errorf(codes.Aborted, format, args...)
	}
	return err
}

// readOne reads id with a strong read and decodes it; NotFound says
// "<what> <name> not found in namespace <ns>".
func readOne[T proto.Message](ctx context.Context, api resource.API, id *pbresource.ID, what string) (*pbresource.Resource, T, error) {
	var zero T
	resp, err := api.Read(ctx, &pbresource.ReadRequest{Id: id, Consistent: true})
	if status.Code(err) == codes.NotFound {
		return nil, zero, status.Errorf(codes.NotFound, "%s %s not found in namespace %s", what, id.GetName(), id.GetTenancy().GetNamespace())
	}
	if err != nil {
		return nil, zero, err
	}
	m, err := resource.DecodeData[T](resp.GetResource())
	if err != nil {
		return nil, zero, err
	}
	return resp.GetResource(), m, nil
}
