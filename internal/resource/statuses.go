package resource

import (
	"context"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/storage"
)

// WriteStatuses writes many status entries, each as WriteStatus would,
// in one storage batch: one Raft entry for a whole report when nothing
// conflicts. See WriteStatusesRequest for what fails the request and what
// fails only a member, and StatusResult to read a member's outcome.
func (s *Service) WriteStatuses(ctx context.Context, req *pbresource.WriteStatusesRequest) (*pbresource.WriteStatusesResponse, error) {
	return answers{s, true}.WriteStatuses(ctx, req)
}

func (a answers) WriteStatuses(ctx context.Context, req *pbresource.WriteStatusesRequest) (*pbresource.WriteStatusesResponse, error) {
	out, err := a.writeStatuses(ctx, req)
	if err != nil {
		return nil, a.errs.toStatus("write statuses", err)
	}
	for _, r := range out.GetResults() {
		r.Resource = a.one(r.GetResource())
	}
	return out, nil
}

// StatusResult returns a WriteStatuses member's resource, or its error as
// the gRPC status error WriteStatus would have returned.
func StatusResult(r *pbresource.WriteStatusResult) (*pbresource.Resource, error) {
	if e := r.GetError(); e != nil {
		return nil, status.Error(codes.Code(e.GetCode()), e.GetMessage())
	}
	return r.GetResource(), nil
}

func statusMemberField(i int) string { return "statuses[" + strconv.Itoa(i) + "]" }

// writeStatuses checks every member, then plans and writes them in rounds.
// Each round reads the pending members (eventually at first, strongly
// after a conflict), plans each against what it read, and hands the writes
// to the backend in storage batches of at most MaxBatchSize bytes (one, as
// a rule). A member refused by what is stored gets its error as its result
// and takes no further part; a batch that meets a concurrent write (a CAS
// failure) is planned again in the next round, where a member with a
// version then fails alone as stale, and one without is written onto what
// is now stored. A member that follows another (req.Follows) is planned
// only once its predecessor is, fails when its predecessor fails, and is
// never written ahead of it: members keep their order in the storage
// batches, and a batch that meets a conflict defers every batch after it
// to the next round.
func (s *Service) writeStatuses(ctx context.Context, req *pbresource.WriteStatusesRequest) (*pbresource.WriteStatusesResponse, error) {
	a, err := s.authorizer(ctx)
	if err != nil {
		return nil, err
	}
	members := req.GetStatuses()
	if err := checkStatusBatchSize(members); err != nil {
		return nil, err
	}
	writer := StatusWriterOf(ctx)
	entries := make([]*statusEntry, len(members))
	first := make(map[slotKey]int, len(members))
	for i, m := range members {
		e, err := s.prepareStatusMember(ctx, i, m, writer)
		if err != nil {
			return nil, err
		}
		key := nameKey(e.id)
		if j, dup := first[key]; dup {
			return nil, NewFieldError(statusMemberField(i)+".id", "names the same resource as %s: a request writes each resource's status once", statusMemberField(j))
		}
		first[key] = i
		entries[i] = e
	}
	follows, err := checkFollows(req.GetFollows(), len(members))
	if err != nil {
		return nil, err
	}
	results := make([]*pbresource.WriteStatusResult, len(entries))
	pending := entries
	consistency := storage.EventualConsistency
	for attempt := range maxWriteAttempts {
		var plans []statusPlan
		var planned []*statusEntry
		for _, e := range pending {
			if i, ok := follows[e.member]; ok && results[i] != nil && results[i].GetError() != nil {
				results[e.member] = s.memberError(status.Errorf(codes.Aborted, "follows %s, which was not stored", statusMemberField(i)))
				continue
			}
			p, err := s.planStatusWithRead(ctx, consistency, a, e)
			if err != nil {
				return nil, withPrefix(statusMemberField(e.member), err)
			}
			switch {
			case p.refusal != nil:
				results[e.member] = s.memberError(p.refusal)
			case p.write == nil:
				results[e.member] = &pbresource.WriteStatusResult{Resource: p.stored}
			default:
				plans = append(plans, p)
				planned = append(planned, e)
			}
		}
		conflicted, err := s.applyStatusWrites(ctx, plans, planned, results)
		if err != nil {
			return nil, err
		}
		if len(conflicted) == 0 {
			return &pbresource.WriteStatusesResponse{Results: results}, nil
		}
		pending = conflicted
		consistency = storage.StrongConsistency
		if err := conflictPause(ctx, attempt); err != nil {
			return nil, err
		}
	}
	for _, e := range pending {
		results[e.member] = s.memberError(status.Errorf(codes.Aborted, "gave up after %d attempts: concurrent writes kept changing the resource; retry", maxWriteAttempts))
	}
	return &pbresource.WriteStatusesResponse{Results: results}, nil
}

// applyStatusWrites writes the planned members in storage batches of at
// most MaxBatchSize encoded bytes, recording each written member's result.
// It returns the members of the batches that met a concurrent write, to be
// planned again. Any other error of the store ends the request: the
// batches written before it stay written, and their members' results are
// lost to the caller, who sees the error and writes them again (a status
// write is idempotent).
func (s *Service) applyStatusWrites(ctx context.Context, plans []statusPlan, planned []*statusEntry, results []*pbresource.WriteStatusResult) ([]*statusEntry, error) {
	var conflicted []*statusEntry
	for start := 0; start < len(plans); {
		end, size := start, 0
		for end < len(plans) && (end == start || size+proto.Size(plans[end].write) <= MaxBatchSize) {
			size += proto.Size(plans[end].write)
			end++
		}
		writes := make([]*pbresource.Resource, 0, end-start)
		for _, p := range plans[start:end] {
			writes = append(writes, p.write)
		}
		stored, err := s.backend.WriteBatch(ctx, writes)
		switch {
		case err == nil:
			for j, e := range planned[start:end] {
				results[e.member] = &pbresource.WriteStatusResult{Resource: stored[j]}
			}
		case isConflict(err):
			// This batch and every one after it go to the next round: a
			// later batch may hold members that follow one of this one.
			return append(conflicted, planned[start:]...), nil
		default:
			return nil, err
		}
		start = end
	}
	return conflicted, nil
}

// checkFollows checks a request's ordering of members (each follows an
// earlier member) and returns it keyed by member.
func checkFollows(follows map[uint32]uint32, n int) (map[int]int, error) {
	out := make(map[int]int, len(follows))
	for j, i := range follows {
		field := "follows[" + strconv.Itoa(int(j)) + "]"
		switch {
		case int(j) >= n:
			return nil, NewFieldError(field, "names member %d, but the request has %d", j, n)
		case i >= j:
			return nil, NewFieldError(field, "is %d: a member follows an earlier member", i)
		}
		out[int(j)] = int(i)
	}
	return out, nil
}

// memberError makes a member's refusal its result, with the code and
// message WriteStatus would have answered.
func (s *Service) memberError(err error) *pbresource.WriteStatusResult {
	st := status.Convert(s.errs.toStatus("write status", err))
	return &pbresource.WriteStatusResult{Error: &pbresource.MemberError{Code: uint32(st.Code()), Message: st.Message()}}
}

// checkStatusBatchSize refuses an empty request and one over the member or
// size limits of a WriteBatch, before any member is looked at.
func checkStatusBatchSize(members []*pbresource.WriteStatusRequest) error {
	if len(members) == 0 {
		return NewFieldError("statuses", "is empty: a request needs at least one status")
	}
	if len(members) > MaxBatchMembers {
		return status.Errorf(codes.ResourceExhausted, "statuses: the request has %d members, over the limit of %d; split it", len(members), MaxBatchMembers)
	}
	total := 0
	for _, m := range members {
		total += proto.Size(m)
	}
	if total > MaxBatchSize {
		return status.Errorf(codes.ResourceExhausted, "statuses: the request is %d bytes encoded, over the limit of %d bytes; split it", total, MaxBatchSize)
	}
	return nil
}
