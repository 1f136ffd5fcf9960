package resource

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/storage"
)

// Tenancy is part of the generic service: a namespaced resource may only be
// written into a Namespace that exists, and a Namespace may only be deleted
// once it is empty. The service therefore knows the Namespace type by name;
// the core package registers its data and validation.

// DefaultNamespace is where namespaced resources live when their id names no
// namespace. It always exists, whether or not it is stored, and cannot be
// deleted.
const DefaultNamespace = "default"

// NamespaceType is core/v1/Namespace.
var NamespaceType = &pbresource.Type{Group: "core", GroupVersion: "v1", Kind: "Namespace"}

// NamespaceID returns the id of the Namespace called name.
func NamespaceID(name string) *pbresource.ID {
	return &pbresource.ID{Type: NamespaceType, Tenancy: &pbresource.Tenancy{}, Name: name}
}

func isNamespaceType(t *pbresource.Type) bool { return ids.SameType(t, NamespaceType) }

// namespaceExists reports whether a namespace may hold resources. A local
// (eventual) read answers the common case; a miss is confirmed with a strong
// read, so that a Namespace created a moment ago through the leader is not
// refused on a follower that has not applied it yet.
func (s *Service) namespaceExists(ctx context.Context, ns string) error {
	if ns == DefaultNamespace {
		return nil
	}
	for _, c := range []storage.ReadConsistency{storage.EventualConsistency, storage.StrongConsistency} {
		_, err := s.backend.Read(ctx, c, NamespaceID(ns))
		if err == nil {
			return nil
		}
		if !errors.Is(err, storage.ErrNotFound) {
			return err
		}
	}
	return status.Errorf(codes.FailedPrecondition, "id.tenancy.namespace: namespace %q does not exist: create it first", ns)
}

// checkNamespaces checks that every namespace of the given ids exists,
// reading each distinct namespace once. prefix names the request member of
// each id for the error.
func (s *Service) checkNamespaces(ctx context.Context, idList []*pbresource.ID, prefix func(i int) string) error {
	seen := make(map[string]bool)
	for i, id := range idList {
		ns := id.GetTenancy().GetNamespace()
		if ns == "" {
			continue
		}
		if ok, done := seen[ns]; done {
			if !ok {
				return withPrefix(prefix(i), status.Errorf(codes.FailedPrecondition, "id.tenancy.namespace: namespace %q does not exist: create it first", ns))
			}
			continue
		}
		err := s.namespaceExists(ctx, ns)
		seen[ns] = err == nil
		if err != nil {
			return withPrefix(prefix(i), err)
		}
	}
	return nil
}

// checkNamespaceDeletable refuses to delete a namespace that still holds resources of any registered namespaced type. The count is
// read with strong consistency. A write racing with the delete can still
// land in the namespace just before it goes; see the package comment.
func (s *Service) checkNamespaceDeletable(ctx context.Context, name string) error {
	var held []string
	for _, reg := range s.registry.Types() {
		if reg.Scope != ScopeNamespace {
			continue
		}
		res, err := s.backend.List(ctx, storage.StrongConsistency, reg.Type, &pbresource.Tenancy{Namespace: name}, "")
		if err != nil {
			return err
		}
		if len(res) > 0 {
			held = append(held, fmt.Sprintf("%d %s", len(res), ids.TypeString(reg.Type)))
		}
	}
	if len(held) == 0 {
		return nil
	}
	return status.Errorf(codes.FailedPrecondition, "namespace %q is not empty: it still holds %s; delete those first", name, strings.Join(held, ", "))
}
