package resource

import (
	"context"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pbresource "trellis.dev/trellis/api/resource/v1"
)

// WriteBatch writes several resources atomically: all of them or none.
// Every member is validated and authorized as a Write would be, and a
// refusal names the member ("resources[3].id.name: ..."). Members that
// carry a version are CAS writes; the others are upserts. Members identical
// to what is stored are not written and come back as stored.
func (s *Service) WriteBatch(ctx context.Context, req *pbresource.WriteBatchRequest) (*pbresource.WriteBatchResponse, error) {
	return answers{s, true}.WriteBatch(ctx, req)
}

func (s *Service) writeBatch(ctx context.Context, req *pbresource.WriteBatchRequest) ([]*pbresource.Resource, error) {
	a, err := s.authorizer(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkBatchSize(req.GetResources()); err != nil {
		return nil, err
	}
	cands := make([]*candidate, len(req.GetResources()))
	ids := make([]*pbresource.ID, len(cands))
	first := make(map[slotKey]int, len(cands))
	for i, in := range req.GetResources() {
		c, err := s.prepare(i, in)
		if err != nil {
			return nil, err
		}
		key := nameKey(c.res.GetId())
		if j, dup := first[key]; dup {
			return nil, NewFieldError(memberField(i)+".id", "names the same resource as %s: a batch writes each resource once", memberField(j))
		}
		first[key] = i
		if err := s.authorizeWrite(a, c.reg, c.res); err != nil {
			return nil, withPrefix(memberField(i), err)
		}
		cands[i], ids[i] = c, c.res.GetId()
	}
	if err := s.checkNamespaces(ctx, ids, memberField); err != nil {
		return nil, err
	}
	return s.applyWrites(ctx, cands, true)
}

func memberField(i int) string { return "resources[" + strconv.Itoa(i) + "]" }

// slotKey identifies the slot a resource occupies, whatever its uid.
type slotKey struct {
	typ      typeKey
	ns, name string
}

func nameKey(id *pbresource.ID) slotKey {
	return slotKey{keyOf(id.GetType()), id.GetTenancy().GetNamespace(), id.GetName()}
}

// checkBatchSize refuses an empty batch and one over the member or size
// limits, before any member is looked at.
func checkBatchSize(members []*pbresource.Resource) error {
	if len(members) == 0 {
		return NewFieldError("resources", "is empty: a batch needs at least one resource")
	}
	if len(members) > MaxBatchMembers {
		return status.Errorf(codes.ResourceExhausted, "resources: the batch has %d members, over the limit of %d; split it", len(members), MaxBatchMembers)
	}
	total := 0
	for _, m := range members {
		total += proto.Size(m)
	}
	if total > MaxBatchSize {
		return status.Errorf(codes.ResourceExhausted, "resources: the batch is %d bytes encoded, over the limit of %d bytes; split it", total, MaxBatchSize)
	}
	return nil
}
