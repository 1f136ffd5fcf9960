package scheduler

import (
	"context"
	"slices"
	"strings"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/resource"
)

// The reads the operations and the controller share: an environment's
// versions and deployments.

// ListOwned lists the resources of typ (versions or deployments) that
// this incarnation of env owns. consistent asks for a strong read, which
// an operation on a follower needs to see what was just written through
// another server; the controller runs on the leader and reads locally.
func ListOwned(ctx context.Context, api resource.API, env *pbresource.Resource, typ *pbresource.Type, consistent bool) ([]*pbresource.Resource, error) {
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

// DecodeDeployments decodes deployments as readers see them
// (DecodeDeployment), oldest first (their names are ULIDs), leaving out
// any that does not decode.
func DecodeDeployments(list []*pbresource.Resource) []*StoredDeployment {
	out := make([]*StoredDeployment, 0, len(list))
	for _, r := range list {
		if d, err := DecodeDeployment(r); err == nil {
			out = append(out, &StoredDeployment{Res: r, Data: d})
		}
	}
	slices.SortFunc(out, func(a, b *StoredDeployment) int {
		return strings.Compare(a.Res.GetId().GetName(), b.Res.GetId().GetName())
	})
	return out
}
