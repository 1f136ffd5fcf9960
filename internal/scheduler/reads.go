package scheduler

import (
	"context"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pbresource "trellis.dev/trellis/api/resource/v1"
	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/resource"
)

// The reads the operations and the controller share: an environment's
// versions and deployments, and one resource of a known type.

// listOwned lists the resources of typ (versions or deployments) that
// this incarnation of env owns. consistent asks for a strong read, which
// an operation on a follower needs to see what was just written through
// another server; the controller runs on the leader and reads locally.
func listOwned(ctx context.Context, api resource.API, env *pbresource.Resource, typ *pbresource.Type, consistent bool) ([]*pbresource.Resource, error) {
	resp, err := api.List(ctx, &pbresource.ListRequest{Type: typ, Tenancy: env.GetId().GetTenancy(), Consistent: consistent})
	if err != nil {
		return nil, err
	}
	var out []*pbresource.Resource
	for _, r := range resp.GetResources() {
		if r.GetOwner().GetUid() == env.GetId().GetUid() {
			out = append(out, r)
		}
	}
	return out, nil
}

// decodeDeployments decodes deployments, oldest first (their names are
// ULIDs), leaving out any that does not decode.
func decodeDeployments(list []*pbresource.Resource) []*deployment {
	out := make([]*deployment, 0, len(list))
	for _, r := range list {
		if d, err := resource.DecodeData[*pbscheduler.Deployment](r); err == nil {
			out = append(out, &deployment{res: r, d: d})
		}
	}
	slices.SortFunc(out, func(a, b *deployment) int { return strings.Compare(a.res.GetId().GetName(), b.res.GetId().GetName()) })
	return out
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
