package resource

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/storage"
)

// checkOwner calls the ValidateOwner hook of a candidate that is about to
// be created, with its owner: the member of the same batch that writes it
// (as that member asks it to be), or the owner as stored. A type without
// the hook, and a resource without an owner, pass. An owner that is not
// stored under its uid refuses the create: the hook has nothing to agree
// with, and the owner reaper would delete the resource at once. An
// eventual read that misses the owner is confirmed with a strong one,
// since the owner may have just been written through another server.
func (s *Service) checkOwner(ctx context.Context, consistency storage.ReadConsistency, cands []*candidate, c *candidate) error {
	if c.reg.ValidateOwner == nil || c.res.GetOwner() == nil {
		return nil
	}
	if c.owner >= 0 {
		return hookError(c.reg.ValidateOwner(cands[c.owner].res, c.res))
	}
	want := c.res.GetOwner()
	for {
		owner, err := s.readCurrent(ctx, consistency, want)
		if err != nil {
			return err
		}
		if owner == nil || owner.GetId().GetUid() != want.GetUid() {
			if consistency == storage.EventualConsistency {
				consistency = storage.StrongConsistency
				continue
			}
			return status.Errorf(codes.FailedPrecondition, "owner: %s with uid %s does not exist, and %s must agree with its owner", ids.String(want), want.GetUid(), ids.TypeString(c.reg.Type))
		}
		return hookError(c.reg.ValidateOwner(owner, c.res))
	}
}
