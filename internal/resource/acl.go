package resource

import (
	"errors"
	"fmt"
	"trellis.dev/trellis/internal/acl"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
)

// DefaultACLHooks returns the hooks a type gets for every hook it leaves
// nil: namespaced types need the namespace's read or write permission;
// cluster-scoped types need operator read or write. Listing every namespace
// ("*") of a namespaced type is allowed as such; the service then filters
// the result with the Read hook, so the caller sees only what it may read.
func DefaultACLHooks(scope Scope) ACLHooks {
	if scope == ScopeCluster {
		return ACLHooks{
			Read:  func(a acl.Authorizer, _ *pbresource.ID) error { return a.OperatorRead() },
			Write: func(a acl.Authorizer, _ *pbresource.Resource) error { return a.OperatorWrite() },
			List:  func(a acl.Authorizer, _ *pbresource.Tenancy) error { return a.OperatorRead() },
		}
	}
	return ACLHooks{
		Read: func(a acl.Authorizer, id *pbresource.ID) error {
			return a.NamespaceRead(id.GetTenancy().GetNamespace())
		},
		Write: func(a acl.Authorizer, res *pbresource.Resource) error {
			return a.NamespaceWrite(res.GetId().GetTenancy().GetNamespace())
		},
		List: func(a acl.Authorizer, t *pbresource.Tenancy) error {
			if t.GetNamespace() == ids.WildcardNamespace {
				return nil
			}
			return a.NamespaceRead(t.GetNamespace())
		},
	}
}

// hooks returns the type's ACL hooks with the defaults filled in.
func hooks(reg Registration) ACLHooks {
	h := DefaultACLHooks(reg.Scope)
	if reg.ACLs == nil {
		return h
	}
	if reg.ACLs.Read != nil {
		h.Read = reg.ACLs.Read
	}
	if reg.ACLs.Write != nil {
		h.Write = reg.ACLs.Write
	}
	if reg.ACLs.List != nil {
		h.List = reg.ACLs.List
	}
	return h
}

// aclError turns a hook's refusal into PermissionDenied. A hook failing for
// another reason is a fault of the hook (or of the authorizer behind it),
// reported as Internal by the caller's error mapping.
func aclError(what string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	if errors.Is(err, acl.ErrPermissionDenied) {
		return status.Errorf(codes.PermissionDenied, "%s: %v", what, err)
	}
	if errors.Is(err, acl.ErrTokenRequired) {
		return status.Errorf(codes.Unauthenticated, "%s: %v", what, err)
	}
	return fmt.Errorf("ACL hook for %s: %w", what, err)
}

func (s *Service) authorizeRead(a acl.Authorizer, reg Registration, id *pbresource.ID) error {
	return aclError("read "+ids.String(id), hooks(reg).Read(a, id))
}

func (s *Service) authorizeWrite(a acl.Authorizer, reg Registration, res *pbresource.Resource) error {
	err := hooks(reg).Write(a, res)
	if err == nil {
		return nil
	}
	return aclError("write "+ids.String(res.GetId()), err)
}

func (s *Service) authorizeList(a acl.Authorizer, reg Registration, t *pbresource.Tenancy) error {
	what := "list " + ids.TypeString(reg.Type)
	if ns := t.GetNamespace(); ns != "" {
		what += " in namespace " + ns
	}
	return aclError(what, hooks(reg).List(a, t))
}

// canRead filters a listed or watched resource through its type's Read
// hook. Only a refusal hides it; any other failure of the hook is returned.
// A sealed resource is hidden unless ops (the call is FromOperations).
func (s *Service) canRead(a acl.Authorizer, ops bool, res *pbresource.Resource) (bool, error) {
	reg, ok := s.registry.Resolve(res.GetId().GetType())
	if !ok {
		// A type stored but no longer registered: only operators see it.
		reg = Registration{Type: res.GetId().GetType(), Scope: ScopeCluster}
	}
	if reg.Sealed && !ops {
		return false, nil
	}
	err := hooks(reg).Read(a, res.GetId())
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, acl.ErrPermissionDenied) || status.Code(err) == codes.PermissionDenied:
		return false, nil
	}
	return false, aclError("read "+ids.String(res.GetId()), err)
}
