package resource

import (
	"context"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/acl"
	"trellis.dev/trellis/internal/ids"
)

// WriteBatch writes several resources atomically: all of them or none.
// Every member is validated and authorized as a Write would be, and a
// refusal names the member ("resources[3].id.name: ..."). Members that
// carry a version are CAS writes; the others are upserts. Members identical
// to what is stored are not written and come back as stored. Its compares
// are checked in the same atomic step (a failed one is named:
// "compares[1]: ..."), each authorized as a read of what it looks at. A
// member may name as its owner another member, without the uid, which the
// batch gives it: an owner and what it owns are created together. Its
// status entries are written in the same atomic step, each checked and
// allowed as WriteStatus would (batchStatuses).
func (s *Service) WriteBatch(ctx context.Context, req *pbresource.WriteBatchRequest) (*pbresource.WriteBatchResponse, error) {
	return answers{s, true}.WriteBatch(ctx, req)
}

// writeBatch returns the resources as the batch left them: its members',
// then its status entries'.
func (s *Service) writeBatch(ctx context.Context, req *pbresource.WriteBatchRequest) ([]*pbresource.Resource, error) {
	a, err := s.authorizer(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkBatchSize(req.GetResources(), req.GetStatuses()); err != nil {
		return nil, err
	}
	compares, err := s.prepareCompares(a, fromOperations(ctx), req.GetCompares())
	if err != nil {
		return nil, err
	}
	cands := make([]*candidate, len(req.GetResources()))
	idList := make([]*pbresource.ID, len(cands))
	first := make(map[slotKey]int, len(cands))
	for i, in := range req.GetResources() {
		if err := s.registry.checkSealedType(ctx, in.GetId().GetType()); err != nil {
			return nil, withPrefix(memberField(i), err)
		}
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
		if err := CheckAgentWrite(StatusWriterOf(ctx), c.reg, c.res); err != nil {
			return nil, withPrefix(memberField(i), err)
		}
		if err := checkWrittenThrough(ctx, c.reg); err != nil {
			return nil, withPrefix(memberField(i), err)
		}
		cands[i], idList[i] = c, c.res.GetId()
	}
	if err := linkOwners(cands, first); err != nil {
		return nil, err
	}
	statuses, err := s.batchStatuses(ctx, a, req.GetStatuses(), first)
	if err != nil {
		return nil, err
	}
	if err := s.checkNamespaces(ctx, outsideCreatedNamespaces(idList), memberField); err != nil {
		return nil, err
	}
	return s.applyWrites(ctx, cands, true, compares, statuses)
}

// batchStatuses checks a batch's status entries as WriteStatuses checks
// its members (a field, the key and its payload, a sealed type), and
// refuses one that names a resource another entry names: a resource is
// written once. An entry may name a resource the batch writes (a
// registration that creates its resource with its status, in one
// commit): it is written with that member, takes no version of its own
// (the member's is the compare-and-swap) and is checked against what the
// member leaves (planMemberStatus). Who writes, and whether the key is
// theirs, is checked against the resource the entry meets when it is
// planned, before anything is written.
func (s *Service) batchStatuses(ctx context.Context, a acl.Authorizer, reqs []*pbresource.WriteStatusRequest, first map[slotKey]int) (*batchStatusEntries, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	out := &batchStatusEntries{a: a, entries: make([]*statusEntry, len(reqs))}
	writer := StatusWriterOf(ctx)
	named := make(map[slotKey]int, len(reqs))
	for i, m := range reqs {
		e, err := s.prepareStatusMember(ctx, i, m, writer)
		if err != nil {
			return nil, err
		}
		key := nameKey(e.id)
		if j, ok := first[key]; ok {
			if e.version != "" {
				return nil, NewFieldError(statusMemberField(i)+".version", "must be empty: the entry names the resource %s writes, whose own version is the compare-and-swap", memberField(j))
			}
			e.onMember = j
		}
		if j, dup := named[key]; dup {
			return nil, NewFieldError(statusMemberField(i)+".id", "names the same resource as %s: a batch writes each resource once", statusMemberField(j))
		}
		named[key] = i
		out.entries[i] = e
	}
	return out, nil
}

// batchStatusEntries are a batch's status entries, checked, with the
// authorizer they are allowed by.
type batchStatusEntries struct {
	a       acl.Authorizer
	entries []*statusEntry
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
func checkBatchSize(members []*pbresource.Resource, statuses []*pbresource.WriteStatusRequest) error {
	if len(members) == 0 {
		return NewFieldError("resources", "is empty: a batch needs at least one resource")
	}
	if n := len(members) + len(statuses); n > MaxBatchMembers {
		return status.Errorf(codes.ResourceExhausted, "resources: the batch has %d members, over the limit of %d; split it", n, MaxBatchMembers)
	}
	total := 0
	for _, m := range members {
		total += proto.Size(m)
	}
	for _, m := range statuses {
		total += proto.Size(m)
	}
	if total > MaxBatchSize {
		return status.Errorf(codes.ResourceExhausted, "resources: the batch is %d bytes encoded, over the limit of %d bytes; split it", total, MaxBatchSize)
	}
	return nil
}

// linkOwners finds, for each candidate whose owner the batch also writes,
// that member (candidate.owner). An owner named without its uid must be
// one: the batch gives it its uid, the new one when the batch creates it.
func linkOwners(cands []*candidate, members map[slotKey]int) error {
	for i, c := range cands {
		owner := c.res.GetOwner()
		if owner == nil {
			continue
		}
		j, ok := members[nameKey(owner)]
		if !ok && c.ownerUID == "" {
			return NewFieldError(memberField(i)+".owner.uid", "is required: an owner is one incarnation of a resource, named by its uid; only an owner written in the same batch may be named without it")
		}
		if ok {
			c.owner = j
		}
	}
	return nil
}

// planOrder orders the candidates so that an owner the batch writes, and
// that its owned members name without a uid, is planned before them: its
// plan gives them the uid. Owners that form a cycle that way are refused.
func planOrder(cands []*candidate) ([]int, error) {
	order := make([]int, 0, len(cands))
	state := make([]byte, len(cands)) // 0 unvisited, 1 being visited, 2 placed
	var visit func(i int) error
	visit = func(i int) error {
		switch state[i] {
		case 2:
			return nil
		case 1:
			return NewFieldError(memberField(i)+".owner", "the members of the batch own one another in a cycle without their uids; name the owner's uid")
		}
		state[i] = 1
		if c := cands[i]; c.owner >= 0 && c.ownerUID == "" {
			if err := visit(c.owner); err != nil {
				return err
			}
		}
		state[i] = 2
		order = append(order, i)
		return nil
	}
	for i := range cands {
		if err := visit(i); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// takeOwnerUID sets the uid of a candidate's owner when the batch writes
// that owner (plans holds its plan already): the uid the owner has once
// the batch is applied. An owner named with another uid is refused: the
// batch would leave this member owned by an incarnation that is gone.
func (c *candidate) takeOwnerUID(plans []writePlan) error {
	if c.owner < 0 {
		return nil
	}
	p := plans[c.owner]
	uid := p.write.GetId().GetUid()
	if p.write == nil {
		uid = p.stored.GetId().GetUid()
	}
	if uid == "" {
		// Its plan is not made yet: an owner named with its uid, planned
		// after this member. The uid given stands; a CAS on the owner
		// catches a change.
		return nil
	}
	if c.ownerUID != "" && c.ownerUID != uid {
		return status.Errorf(codes.Aborted, "owner.uid: %s is not the uid of %s (member %s), which is %s once the batch is applied; re-read it and retry", c.ownerUID, ids.String(c.res.GetOwner()), memberField(c.owner), uid)
	}
	o := c.res.GetOwner()
	c.res.Owner = &pbresource.ID{Type: o.GetType(), Tenancy: o.GetTenancy(), Name: o.GetName(), Uid: uid}
	return nil
}

// outsideCreatedNamespaces is idList with nil in place of the ids in a
// namespace the batch itself writes (creates, most likely): that one needs
// not exist before.
func outsideCreatedNamespaces(idList []*pbresource.ID) []*pbresource.ID {
	written := make(map[string]bool)
	for _, id := range idList {
		if isNamespaceType(id.GetType()) {
			written[id.GetName()] = true
		}
	}
	if len(written) == 0 {
		return idList
	}
	out := make([]*pbresource.ID, len(idList))
	for i, id := range idList {
		if !written[id.GetTenancy().GetNamespace()] {
			out[i] = id
		}
	}
	return out
}
