package resource

import (
	"context"
	"fmt"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/storage"
)

// Limits on a status.
const (
	MaxConditions             = 64
	MaxConditionReasonLength  = 256
	MaxConditionMessageLength = 32 << 10
)

// WriteStatus sets one controller's entry of a resource's status. It never
// changes data, metadata or generation. The status write is the only way to
// change status: Write carries the stored status over.
func (s *Service) WriteStatus(ctx context.Context, req *pbresource.WriteStatusRequest) (*pbresource.WriteStatusResponse, error) {
	out, err := s.writeStatus(ctx, req)
	if err != nil {
		return nil, s.errs.toStatus("write status", err)
	}
	return &pbresource.WriteStatusResponse{Resource: clone(out)}, nil
}

func (s *Service) writeStatus(ctx context.Context, req *pbresource.WriteStatusRequest) (*pbresource.Resource, error) {
	a, err := s.authorizer(ctx)
	if err != nil {
		return nil, err
	}
	id, reg, err := s.registry.checkID("id", req.GetId())
	if err != nil {
		return nil, err
	}
	if err := ValidateQualifiedName("key", req.GetKey()); err != nil {
		return nil, err
	}
	if err := s.checkStatus(req.GetStatus()); err != nil {
		return nil, err
	}
	authorized := false
	consistency := storage.EventualConsistency
	for attempt := range maxWriteAttempts {
		stored, err := s.readCurrent(ctx, consistency, id)
		if err != nil {
			return nil, err
		}
		if stored == nil && consistency == storage.EventualConsistency {
			consistency = storage.StrongConsistency
			continue
		}
		if !authorized {
			// The Write hook sees the stored resource, or only the id when
			// there is none (which it must not learn before it is allowed).
			target := stored
			if target == nil {
				target = &pbresource.Resource{Id: id}
			}
			if err := s.authorizeWrite(a, reg, target); err != nil {
				return nil, err
			}
			authorized = true
		}
		if stored == nil {
			return nil, fmt.Errorf("%s: %w", ids.String(id), storage.ErrNotFound)
		}
		write, err := planStatus(req, id, stored)
		if (err != nil || write == nil) && consistency == storage.EventualConsistency {
			consistency = storage.StrongConsistency
			continue
		}
		if err != nil {
			return nil, err
		}
		if write == nil {
			return stored, nil
		}
		out, err := s.backend.WriteCAS(ctx, write)
		if err == nil {
			return out, nil
		}
		if !isConflict(err) {
			return nil, err
		}
		consistency = storage.StrongConsistency
		if err := conflictPause(ctx, attempt); err != nil {
			return nil, err
		}
	}
	return nil, status.Errorf(codes.Aborted, "gave up after %d attempts: concurrent writes kept changing the resource; retry", maxWriteAttempts)
}

// planStatus decides the resource to write for a status request, or nil
// when the stored status under the key is already the requested one.
func planStatus(req *pbresource.WriteStatusRequest, id *pbresource.ID, stored *pbresource.Resource) (*pbresource.Resource, error) {
	name := ids.String(id)
	if uid := id.GetUid(); uid != "" && uid != stored.GetId().GetUid() {
		return nil, status.Errorf(codes.Aborted, "id.uid: %s now has uid %s, not %s: it was deleted and re-created; re-read it and retry", name, stored.GetId().GetUid(), uid)
	}
	if v := req.GetVersion(); v != "" && v != stored.GetVersion() {
		return nil, status.Errorf(codes.Aborted, "version: conflict: %s is at version %s, not %s; re-read it and retry", name, stored.GetVersion(), v)
	}
	if og, g := req.GetStatus().GetObservedGeneration(), stored.GetGeneration(); og > g {
		return nil, NewFieldError("status.observed_generation", "%d is ahead of the resource's generation %d", og, g)
	}
	if proto.Equal(stored.GetStatus()[req.GetKey()], req.GetStatus()) {
		return nil, nil
	}
	w := &pbresource.Resource{
		Id:         stored.GetId(),
		Owner:      stored.GetOwner(),
		Version:    stored.GetVersion(),
		Generation: stored.GetGeneration(),
		Metadata:   stored.GetMetadata(),
		Data:       stored.GetData(),
		Status:     make(map[string]*pbresource.Status, len(stored.GetStatus())+1),
	}
	for k, v := range stored.GetStatus() {
		w.Status[k] = v
	}
	w.Status[req.GetKey()] = req.GetStatus()
	if err := checkSize(w); err != nil {
		return nil, err
	}
	return w, nil
}

// checkStatus validates a status's conditions.
func (s *Service) checkStatus(st *pbresource.Status) error {
	if st == nil {
		return NewFieldError("status", "is required")
	}
	if n := len(st.GetConditions()); n > MaxConditions {
		return NewFieldError("status.conditions", "has %d conditions, over the limit of %d", n, MaxConditions)
	}
	for i, c := range st.GetConditions() {
		field := fmt.Sprintf("status.conditions[%d]", i)
		if c == nil {
			return NewFieldError(field, "is empty")
		}
		if err := ValidateQualifiedName(field+".type", c.GetType()); err != nil {
			return err
		}
		if _, known := pbresource.State_name[int32(c.GetState())]; !known {
			return NewFieldError(field+".state", "%d is not a known state", int32(c.GetState()))
		}
		if len(c.GetReason()) > MaxConditionReasonLength || !utf8.ValidString(c.GetReason()) {
			return NewFieldError(field+".reason", "must be valid UTF-8 of at most %d bytes", MaxConditionReasonLength)
		}
		if len(c.GetMessage()) > MaxConditionMessageLength || !utf8.ValidString(c.GetMessage()) {
			return NewFieldError(field+".message", "must be valid UTF-8 of at most %d bytes", MaxConditionMessageLength)
		}
		if c.GetResource() != nil {
			if _, _, err := s.registry.checkID(field+".resource", c.GetResource()); err != nil {
				return err
			}
		}
	}
	return nil
}
