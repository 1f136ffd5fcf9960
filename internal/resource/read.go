package resource

import (
	"context"
	"fmt"
	"trellis.dev/trellis/internal/acl"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/storage"
)

func consistency(strong bool) storage.ReadConsistency {
	if strong {
		return storage.StrongConsistency
	}
	return storage.EventualConsistency
}

// Read returns one resource. The Read hook is asked before the store is, so
// a caller who may not read the resource cannot learn whether it exists.
func (s *Service) Read(ctx context.Context, req *pbresource.ReadRequest) (*pbresource.ReadResponse, error) {
	return answers{s, true}.Read(ctx, req)
}

func (s *Service) read(ctx context.Context, req *pbresource.ReadRequest) (*pbresource.Resource, error) {
	a, err := s.authorizer(ctx)
	if err != nil {
		return nil, err
	}
	id, reg, err := s.registry.checkID("id", req.GetId())
	if err != nil {
		return nil, err
	}
	if err := checkSealed(ctx, reg); err != nil {
		return nil, err
	}
	if err := s.authorizeRead(a, reg, id); err != nil {
		return nil, err
	}
	res, err := s.backend.Read(ctx, consistency(req.GetConsistent()), id)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ids.String(id), err)
	}
	return res, nil
}

// List returns the resources of a type in a namespace ("*" for every one)
// whose names start with a prefix, ordered by namespace and name, leaving
// out those the caller may not read.
func (s *Service) List(ctx context.Context, req *pbresource.ListRequest) (*pbresource.ListResponse, error) {
	return answers{s, true}.List(ctx, req)
}

func (s *Service) list(ctx context.Context, req *pbresource.ListRequest) ([]*pbresource.Resource, error) {
	a, err := s.authorizer(ctx)
	if err != nil {
		return nil, err
	}
	reg, tenancy, err := s.registry.checkListQuery(req.GetType(), req.GetTenancy(), req.GetNamePrefix())
	if err != nil {
		return nil, err
	}
	if err := checkSealed(ctx, reg); err != nil {
		return nil, err
	}
	if err := s.authorizeList(a, reg, tenancy); err != nil {
		return nil, err
	}
	res, err := s.backend.List(ctx, consistency(req.GetConsistent()), reg.Type, tenancy, req.GetNamePrefix())
	if err != nil {
		return nil, err
	}
	return s.filterReadable(a, fromOperations(ctx), res)
}

// ListByOwner returns the resources owned by one incarnation of a resource
// (the owner's uid is required), leaving out those the caller may not read.
func (s *Service) ListByOwner(ctx context.Context, req *pbresource.ListByOwnerRequest) (*pbresource.ListByOwnerResponse, error) {
	out, err := s.listByOwner(ctx, req)
	if err != nil {
		return nil, s.errs.toStatus("list by owner", err)
	}
	return &pbresource.ListByOwnerResponse{Resources: cloneAll(out)}, nil
}

func (s *Service) listByOwner(ctx context.Context, req *pbresource.ListByOwnerRequest) ([]*pbresource.Resource, error) {
	a, err := s.authorizer(ctx)
	if err != nil {
		return nil, err
	}
	owner, err := s.registry.checkOwner("owner", req.GetOwner())
	if err != nil {
		return nil, err
	}
	res, err := s.backend.ListByOwner(ctx, owner)
	if err != nil {
		return nil, err
	}
	return s.filterReadable(a, fromOperations(ctx), res)
}

// filterReadable keeps the resources the caller may read (sealed ones only
// when ops: the call comes from in-process operations). It copies the
// slice only once something is dropped, so the common case allocates
// nothing.
func (s *Service) filterReadable(a acl.Authorizer, ops bool, res []*pbresource.Resource) ([]*pbresource.Resource, error) {
	var out []*pbresource.Resource
	for i, r := range res {
		ok, err := s.canRead(a, ops, r)
		if err != nil {
			return nil, err
		}
		switch {
		case !ok && out == nil:
			out = append(make([]*pbresource.Resource, 0, len(res)), res[:i]...)
		case ok && out != nil:
			out = append(out, r)
		}
	}
	if out == nil {
		return res, nil
	}
	return out, nil
}
