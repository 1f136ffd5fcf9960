package resource

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/storage"
)

// Delete deletes one resource, as a CAS when a version is given. Deleting
// what is not stored succeeds. It does not delete what the resource owns:
// the owner reaper does (see the package comment). A type written through
// its own operations is deleted through them (see operations.go): Delete
// refuses it unless the call is FromOperations.
func (s *Service) Delete(ctx context.Context, req *pbresource.DeleteRequest) (*pbresource.DeleteResponse, error) {
	if err := s.delete(ctx, req); err != nil {
		return nil, s.errs.toStatus("delete", err)
	}
	return &pbresource.DeleteResponse{}, nil
}

func (s *Service) delete(ctx context.Context, req *pbresource.DeleteRequest) error {
	a, err := s.authorizer(ctx)
	if err != nil {
		return err
	}
	id, reg, err := s.registry.checkID("id", req.GetId())
	if err != nil {
		return err
	}
	if err := checkSealed(ctx, reg); err != nil {
		return err
	}
	if reg.Permanent && !fromOperations(ctx) {
		return status.Errorf(codes.FailedPrecondition, "%s is permanent: once made, it is never deleted", ids.TypeString(reg.Type))
	}
	namespace := isNamespaceType(id.GetType())
	if namespace && id.GetName() == DefaultNamespace {
		return NewFieldError("id.name", "the %q namespace cannot be deleted", DefaultNamespace)
	}
	// The Write hook sees the stored resource when it is the one named, and
	// only the id otherwise; so do the words of a refusal of a type deleted
	// through its operations. The read may be stale: it only informs them,
	// and the delete itself is decided by the backend.
	target := &pbresource.Resource{Id: id}
	consistency := storage.EventualConsistency
	if reg.AgentWritten != nil && StatusWriterOf(ctx).Agent != "" {
		// Whose it is decides the delete (CheckAgentWrite): read it as
		// the leader has it, or a follower behind could let another
		// agent remove what it has not seen yet.
		consistency = storage.StrongConsistency
	}
	stored, err := s.readCurrent(ctx, consistency, id)
	if err != nil {
		return err
	}
	if stored == nil || (id.GetUid() != "" && id.GetUid() != stored.GetId().GetUid()) {
		stored = nil
	} else {
		target = stored
	}
	if err := s.authorizeWrite(a, reg, target); err != nil {
		return err
	}
	if stored != nil {
		if err := CheckAgentWrite(StatusWriterOf(ctx), reg, stored); err != nil {
			return err
		}
	}
	if err := checkDeletedThrough(ctx, reg, stored); err != nil {
		return err
	}
	if namespace {
		if err := s.checkNamespaceDeletable(ctx, id.GetName()); err != nil {
			return err
		}
	}
	if err := s.backend.DeleteCAS(ctx, id, req.GetVersion()); err != nil {
		return fmt.Errorf("%s: %w", ids.String(id), err)
	}
	return nil
}
