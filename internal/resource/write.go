package resource

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/acl"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/storage"
)

// candidate is one resource of a write request, validated and mutated: what
// the caller asks to store, before it is compared with what is stored.
type candidate struct {
	// member is the index of a batch member, -1 for a Write; see field.
	member int
	reg    Registration
	// res is the normalized request: id with its namespace filled in, data
	// in canonical encoding, no status, generation unset. Version and uid are
	// as the caller gave them.
	res  *pbresource.Resource
	data proto.Message
	// owner is the batch member that is this one's owner, -1 when the
	// owner is not written by the batch (see linkOwners); ownerUID is the
	// owner's uid as the caller gave it, empty when it left it to the
	// batch.
	owner    int
	ownerUID string
}

// field names the candidate in errors: "" for Write, "resources[3]" for
// a batch member. It is built only when an error needs it.
func (c *candidate) field() string {
	if c.member < 0 {
		return ""
	}
	return memberField(c.member)
}

// prepare validates a write request's resource, runs the type's Mutate and
// Validate hooks and returns the candidate to write. It reads nothing.
// member is the index of a batch member, -1 for a Write.
func (s *Service) prepare(member int, in *pbresource.Resource) (*candidate, error) {
	c, err := s.registry.prepareResource(in, member >= 0)
	if err != nil {
		if member < 0 {
			return nil, err
		}
		return nil, withPrefix(memberField(member), err)
	}
	c.member = member
	return c, nil
}

// Check runs on in every check a write of it meets before the store is
// read: its id, owner and metadata, the decoding of its data, and its
// type's Mutate and Validate hooks. A refusal is the error the write would
// return. A client that links the type registrations (the CLI) calls it to
// refuse a bad spec file, naming the field, before it sends any of it; the
// server still checks everything itself.
func (r *Registry) Check(in *pbresource.Resource) error {
	_, err := r.prepareResource(in, false)
	return err
}

// prepareResource is Check, returning the candidate. inBatch lets the
// owner go without its uid, for an owner the same batch writes (which
// linkOwners checks once every member is known).
func (r *Registry) prepareResource(in *pbresource.Resource, inBatch bool) (*candidate, error) {
	if in == nil {
		return nil, NewFieldError("", "a resource is required")
	}
	id, reg, err := r.checkID("id", in.GetId())
	if err != nil {
		return nil, err
	}
	res := &pbresource.Resource{
		Id:       id,
		Version:  in.GetVersion(),
		Metadata: maps.Clone(in.GetMetadata()),
		Data:     in.GetData(),
	}
	switch {
	case in.GetOwner() == nil:
	case inBatch && in.GetOwner().GetUid() == "":
		if res.Owner, _, err = r.checkID("owner", in.GetOwner()); err != nil {
			return nil, err
		}
	default:
		if res.Owner, err = r.checkOwner("owner", in.GetOwner()); err != nil {
			return nil, err
		}
	}
	data, err := checkContent(reg, res)
	if err != nil {
		return nil, err
	}
	if reg.Mutate != nil {
		// The hook may replace the data (as MutateData does) or change the
		// Any's fields; it gets its own Any so the caller's stays as sent.
		given := &anypb.Any{TypeUrl: res.Data.GetTypeUrl(), Value: res.Data.GetValue()}
		res.Data = given
		id, owner, version := idFieldsOf(res.Id), idFieldsOf(res.Owner), res.Version
		if err := hookError(reg.Mutate(res)); err != nil {
			return nil, err
		}
		if id != idFieldsOf(res.GetId()) || owner != idFieldsOf(res.GetOwner()) || version != res.GetVersion() {
			return nil, fmt.Errorf("the Mutate hook of %s changed the id, owner or version", ids.TypeString(reg.Type))
		}
		if sameAny(res.GetData(), given, in.GetData()) {
			// The data is what was decoded: check the rest again.
			if err := checkOwnerAndMetadata(res); err != nil {
				return nil, err
			}
		} else if data, err = checkContent(reg, res); err != nil {
			return nil, err
		}
	}
	if reg.Validate != nil {
		if err := hookError(reg.Validate(res)); err != nil {
			return nil, err
		}
	}
	// Store the data in one canonical encoding, whatever the client sent.
	value, err := proto.MarshalOptions{Deterministic: true}.Marshal(data)
	if err != nil {
		return nil, NewFieldError("data", "cannot be encoded: %v", err)
	}
	res.Data = &anypb.Any{TypeUrl: reg.dataTypeURL, Value: value}
	if err := checkSize(res); err != nil {
		return nil, err
	}
	return &candidate{reg: reg, res: res, data: data, owner: -1, ownerUID: res.GetOwner().GetUid()}, nil
}

// checkContent validates the parts of a resource other than its id and
// returns its decoded data.
func checkContent(reg Registration, res *pbresource.Resource) (proto.Message, error) {
	if err := checkOwnerAndMetadata(res); err != nil {
		return nil, err
	}
	return decodeData(reg, res.GetData())
}

// checkOwnerAndMetadata is checkContent without the data.
func checkOwnerAndMetadata(res *pbresource.Resource) error {
	if err := checkMetadata(res.GetMetadata()); err != nil {
		return err
	}
	if res.GetOwner() != nil && ids.SameName(res.GetOwner(), res.GetId()) {
		return NewFieldError("owner", "a resource cannot own itself")
	}
	return nil
}

// idFields are the values of an id, comparable without allocating: what a
// Mutate hook must leave as it found them.
type idFields struct {
	present                             bool
	group, version, kind, ns, name, uid string
	hasType, hasTenancy                 bool
}

func idFieldsOf(id *pbresource.ID) idFields {
	if id == nil {
		return idFields{}
	}
	t := id.GetType()
	return idFields{
		present: true,
		group:   t.GetGroup(), version: t.GetGroupVersion(), kind: t.GetKind(),
		ns: id.GetTenancy().GetNamespace(), name: id.GetName(), uid: id.GetUid(),
		hasType: t != nil, hasTenancy: id.GetTenancy() != nil,
	}
}

// sameAny reports whether a Mutate hook left the data as it was given: the
// same Any, with the type URL and the very bytes it was decoded from.
func sameAny(got, given, orig *anypb.Any) bool {
	if got != given || got.GetTypeUrl() != orig.GetTypeUrl() || len(got.GetValue()) != len(orig.GetValue()) {
		return false
	}
	return len(got.GetValue()) == 0 || &got.GetValue()[0] == &orig.GetValue()[0]
}

// hookError keeps a hook's FieldError or status error as it is and makes
// any other error a refusal of the resource as a whole.
func hookError(err error) error {
	if err == nil {
		return nil
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		return err
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return &FieldError{Reason: "resource is invalid: " + err.Error()}
}

// writePlan is what to do for one candidate given the stored resource.
type writePlan struct {
	// write is what to hand the backend; nil when the request changes
	// nothing and stored is the answer.
	write  *pbresource.Resource
	stored *pbresource.Resource
}

// planWrite decides how a candidate applies to the stored resource (nil
// when none is stored). It is pure: newUID is called only for a create.
//
//   - create: a new uid, generation 1, no status; version CreateOnly asks
//     for a create and nothing else (Aborted when the resource exists);
//   - a uid or version that does not match the stored one: Aborted;
//   - a different owner: refused, owners are fixed at create;
//   - the same data and metadata: nothing to write;
//   - otherwise: generation + 1, status carried over, CAS on the stored
//     version.
func planWrite(c *candidate, stored *pbresource.Resource, newUID func() (string, error)) (writePlan, error) {
	req := c.res
	name := idName{req.GetId()}
	if stored == nil {
		if uid := req.GetId().GetUid(); uid != "" {
			return writePlan{}, status.Errorf(codes.Aborted, "id.uid: %s with uid %s no longer exists: it was deleted; re-read it and retry", name, uid)
		}
		if v := req.GetVersion(); v != "" && v != CreateOnly {
			return writePlan{}, status.Errorf(codes.Aborted, "version: conflict: %s does not exist, so it is not at version %s; re-read it and retry", name, v)
		}
		uid, err := newUID()
		if err != nil {
			return writePlan{}, fmt.Errorf("new uid: %w", err)
		}
		w := shallowResource(req)
		// A new id that shares the candidate's type and tenancy: the
		// candidate keeps its own (uid-less) id for a retry.
		w.Id = &pbresource.ID{Type: req.GetId().GetType(), Tenancy: req.GetId().GetTenancy(), Name: req.GetId().GetName(), Uid: uid}
		w.Version = ""
		w.Generation = 1
		return writePlan{write: w}, nil
	}
	if uid := req.GetId().GetUid(); uid != "" && uid != stored.GetId().GetUid() {
		return writePlan{}, status.Errorf(codes.Aborted, "id.uid: %s now has uid %s, not %s: it was deleted and re-created; re-read it and retry", name, stored.GetId().GetUid(), uid)
	}
	if req.GetVersion() == CreateOnly {
		return writePlan{}, status.Errorf(codes.Aborted, "version: conflict: %s already exists (version %s was given: create only)", name, CreateOnly)
	}
	if v := req.GetVersion(); v != "" && v != stored.GetVersion() {
		return writePlan{}, status.Errorf(codes.Aborted, "version: conflict: %s is at version %s, not %s; re-read it and retry", name, stored.GetVersion(), v)
	}
	if !proto.Equal(req.GetOwner(), stored.GetOwner()) {
		return writePlan{}, NewFieldError("owner", "cannot change once %s is created (stored owner: %s)", name, ownerString(stored.GetOwner()))
	}
	if sameContent(c, stored) {
		return writePlan{stored: stored}, nil
	}
	if c.reg.Immutable && !sameData(c, stored) {
		return writePlan{}, NewFieldError("data", "cannot change: %s is immutable once written; write a new one instead", name)
	}
	if c.reg.ValidateUpdate != nil {
		if err := hookError(c.reg.ValidateUpdate(stored, c.res)); err != nil {
			return writePlan{}, err
		}
	}
	w := shallowResource(req)
	w.Id = stored.GetId() // the stored uid
	w.Version = stored.GetVersion()
	w.Generation = stored.GetGeneration() + 1
	w.Status = stored.GetStatus()
	if err := checkSize(w); err != nil {
		return writePlan{}, err
	}
	return writePlan{write: w, stored: stored}, nil
}

// shallowResource copies the fields of a candidate that a write stores.
func shallowResource(req *pbresource.Resource) *pbresource.Resource {
	return &pbresource.Resource{
		Id:       req.GetId(),
		Owner:    req.GetOwner(),
		Metadata: req.GetMetadata(),
		Data:     req.GetData(),
	}
}

// sameContent reports whether the candidate's data and metadata equal the
// stored ones. Data is compared decoded, since equal messages may encode
// differently.
func sameContent(c *candidate, stored *pbresource.Resource) bool {
	return maps.Equal(c.res.GetMetadata(), stored.GetMetadata()) && sameData(c, stored)
}

// sameData reports whether the candidate's data equals the stored data.
// Both are in the service's canonical encoding, so equal bytes are equal
// data without decoding; different bytes are decoded and compared, since
// the stored data may have been encoded by another version.
func sameData(c *candidate, stored *pbresource.Resource) bool {
	if stored.GetData().GetTypeUrl() == c.res.GetData().GetTypeUrl() && bytes.Equal(stored.GetData().GetValue(), c.res.GetData().GetValue()) {
		return true
	}
	if stored.GetData().MessageName() != c.data.ProtoReflect().Descriptor().FullName() {
		return false
	}
	old := c.data.ProtoReflect().New().Interface()
	if err := proto.Unmarshal(stored.GetData().GetValue(), old); err != nil {
		return false
	}
	return proto.Equal(c.data, old)
}

// idName formats an id's name for an error message, only when one is
// made.
type idName struct{ id *pbresource.ID }

func (n idName) String() string { return ids.String(n.id) }

func ownerString(id *pbresource.ID) string {
	if id == nil {
		return "none"
	}
	return ids.String(id) + " uid " + id.GetUid()
}

// Write creates or updates one resource; see the package comment.
func (s *Service) Write(ctx context.Context, req *pbresource.WriteRequest) (*pbresource.WriteResponse, error) {
	return answers{s, true}.Write(ctx, req)
}

func (s *Service) write(ctx context.Context, req *pbresource.WriteRequest) (*pbresource.Resource, error) {
	a, err := s.authorizer(ctx)
	if err != nil {
		return nil, err
	}
	// Before prepare: a sealed type's hooks never run for an outside caller.
	if err := s.registry.checkSealedType(ctx, req.GetResource().GetId().GetType()); err != nil {
		return nil, err
	}
	c, err := s.prepare(-1, req.GetResource())
	if err != nil {
		return nil, err
	}
	if err := s.authorizeWrite(a, c.reg, c.res); err != nil {
		return nil, err
	}
	if err := CheckAgentWrite(StatusWriterOf(ctx), c.reg, c.res); err != nil {
		return nil, err
	}
	if err := checkWrittenThrough(ctx, c.reg); err != nil {
		return nil, err
	}
	if err := s.checkNamespaces(ctx, []*pbresource.ID{c.res.GetId()}, func(int) string { return "" }); err != nil {
		return nil, err
	}
	out, err := s.applyWrites(ctx, []*candidate{c}, false, nil, nil)
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// applyWrites plans every candidate against the stored resources and
// writes the ones that change something, all in one CAS operation: a
// WriteCAS for a single write, a WriteBatch for a batch or a write that
// carries compares. compares are the caller's (a batch's); to them the
// write adds its own, checked in the same step: the namespaces it writes
// into exist, and, in a batch that writes, its unchanged members are still
// as read.
//
// The first reads are eventual (local, no round trip to the leader): the
// CAS on the stored version catches a stale read. A plan that would not
// write (a refusal, or a no-op answered from the read) is confirmed with a
// strong read first, since no CAS would catch a stale read there. When the
// CAS fails, every candidate is read again with strong consistency and
// planned again; a candidate that carried a version then fails as stale,
// one that did not is retried, at most maxWriteAttempts times. A compare
// that failed is looked at again: the caller's fails the write, naming
// it; a namespace that is gone fails it as the first check would have.
//
// A batch's status entries (statuses, nil for none) are planned after its
// members, in each attempt, as WriteStatus plans them (allowed once, on
// the first read), and written in the same step; any refusal fails the
// batch, and an entry that would not change its status is compared
// instead, like an unchanged member. The resources come back in the
// order of cands, then of the entries.
func (s *Service) applyWrites(ctx context.Context, cands []*candidate, batch bool, compares []*pbresource.Compare, statuses *batchStatusEntries) ([]*pbresource.Resource, error) {
	order, err := planOrder(cands)
	if err != nil {
		return nil, err
	}
	idList := make([]*pbresource.ID, len(cands))
	for i, c := range cands {
		idList[i] = c.res.GetId()
	}
	nsChecks := namespaceCompares(idList)
	var entries []*statusEntry
	if statuses != nil {
		entries = statuses.entries
	}
	results := make([]*pbresource.Resource, len(cands)+len(entries))
	consistency := storage.EventualConsistency
	for attempt := range maxWriteAttempts {
		plans := make([]writePlan, len(cands))
		for _, i := range order {
			c := cands[i]
			if err := c.takeOwnerUID(plans); err != nil {
				return nil, withPrefix(c.field(), err)
			}
			p, err := s.planWithRead(ctx, consistency, c)
			if err == nil && p.write != nil && p.stored == nil {
				err = s.checkOwner(ctx, consistency, cands, c)
			}
			if err != nil {
				return nil, withPrefix(c.field(), err)
			}
			plans[i] = p
		}
		for j, e := range entries {
			if e.onMember < 0 {
				continue
			}
			if err := s.planMemberStatus(statuses.a, e, &plans[e.onMember]); err != nil {
				return nil, withPrefix(statusMemberField(j), err)
			}
		}
		var (
			writes  []*pbresource.Resource
			members []int
			checks  []*pbresource.Compare
		)
		for i, p := range plans {
			if p.write == nil {
				results[i] = p.stored
				if batch {
					checks = append(checks, &pbresource.Compare{Op: pbresource.Compare_OP_VERSION, Id: p.stored.GetId(), Version: p.stored.GetVersion()})
				}
				continue
			}
			writes = append(writes, p.write)
			members = append(members, i)
		}
		for j, e := range entries {
			if e.onMember >= 0 {
				continue // written with its member
			}
			p, err := s.planStatusWithRead(ctx, consistency, statuses.a, e)
			if err != nil {
				return nil, withPrefix(statusMemberField(j), err)
			}
			switch {
			case p.refusal != nil:
				return nil, withPrefix(statusMemberField(j), p.refusal)
			case p.write == nil:
				results[len(cands)+j] = p.stored
				checks = append(checks, &pbresource.Compare{Op: pbresource.Compare_OP_VERSION, Id: p.stored.GetId(), Version: p.stored.GetVersion()})
			default:
				writes = append(writes, p.write)
				members = append(members, len(cands)+j)
			}
		}
		switch {
		case len(writes) == 0 && len(compares) == 0:
			return withMemberStatuses(results, len(cands), entries), nil
		case len(writes) > 0:
			checks = append(checks, nsChecks...)
		}
		// With nothing to write, the caller's compares still go to the
		// backend: they must hold now, with the members as read.
		checks = append(checks, compares...)
		var stored []*pbresource.Resource
		if batch || len(checks) > 0 {
			stored, err = s.backend.WriteBatch(ctx, writes, checks...)
		} else {
			var one *pbresource.Resource
			one, err = s.backend.WriteCAS(ctx, writes[0])
			stored = []*pbresource.Resource{one}
		}
		if err == nil {
			for j, i := range members {
				results[i] = stored[j]
			}
			return withMemberStatuses(results, len(cands), entries), nil
		}
		if !isConflict(err) {
			return nil, err
		}
		if errors.Is(err, storage.ErrCompareFailed) {
			if err := s.explainCompareFailure(ctx, compares, nsChecks); err != nil {
				return nil, err
			}
		}
		consistency = storage.StrongConsistency
		if err := conflictPause(ctx, attempt); err != nil {
			return nil, err
		}
	}
	return nil, status.Errorf(codes.Aborted, "gave up after %d attempts: concurrent writes kept changing the resource; retry", maxWriteAttempts)
}

// planMemberStatus plans a batch's status entry on a resource the batch
// also writes, against what the member's plan leaves (its write, or the
// stored resource when it writes nothing): the Write hook and the key's
// owner allow it there, and the member's plan then writes the status too,
// in the same commit and under the member's compare-and-swap.
func (s *Service) planMemberStatus(a acl.Authorizer, e *statusEntry, p *writePlan) error {
	target := p.write
	if target == nil {
		target = p.stored
	}
	if err := s.authorizeWrite(a, e.reg, target); err != nil {
		return err
	}
	if err := CheckStatusOwner(e.writer, e.reg, e.key, target); err != nil {
		return err
	}
	w, err := planStatus(e, target)
	if err != nil {
		return err
	}
	if w != nil {
		p.write = w
	}
	return nil
}

// withMemberStatuses fills in the results of the status entries written
// with a member (after the members' results, in entry order): the
// member's result.
func withMemberStatuses(results []*pbresource.Resource, members int, entries []*statusEntry) []*pbresource.Resource {
	for j, e := range entries {
		if e.onMember >= 0 {
			results[members+j] = results[e.onMember]
		}
	}
	return results
}

// planWithRead reads the stored resource and plans the candidate against
// it, confirming with a strong read any plan that would not write.
func (s *Service) planWithRead(ctx context.Context, consistency storage.ReadConsistency, c *candidate) (writePlan, error) {
	for {
		stored, err := s.readCurrent(ctx, consistency, c.res.GetId())
		if err != nil {
			return writePlan{}, err
		}
		p, err := planWrite(c, stored, s.newUID)
		if (err != nil || p.write == nil) && consistency == storage.EventualConsistency {
			consistency = storage.StrongConsistency
			continue
		}
		return p, err
	}
}

// readCurrent reads whatever is stored under an id's name, whatever its
// uid: nil when nothing is.
func (s *Service) readCurrent(ctx context.Context, consistency storage.ReadConsistency, id *pbresource.ID) (*pbresource.Resource, error) {
	byName := id
	if id.GetUid() != "" {
		byName = &pbresource.ID{Type: id.GetType(), Tenancy: id.GetTenancy(), Name: id.GetName()}
	}
	res, err := s.backend.Read(ctx, consistency, byName)
	if errors.Is(err, storage.ErrNotFound) {
		return nil, nil
	}
	return res, err
}

// isConflict reports a CAS failure, whether of one write or of a batch.
func isConflict(err error) bool {
	return errors.Is(err, storage.ErrCASFailure) || errors.Is(err, storage.ErrWrongUID) || errors.Is(err, storage.ErrBatchConflict)
}
