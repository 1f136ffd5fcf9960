package resource

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/acl"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/storage"
)

// The compares of a batch (pbresource.Compare) go to the backend with the
// batch's writes and are checked there atomically with them. The service
// validates and authorizes them, adds its own (the namespaces the batch
// writes into must exist), and, when one fails, finds out which to say so.

func compareField(i int) string { return "compares[" + strconv.Itoa(i) + "]" }

// prepareCompares validates a request's compares and authorizes each as a
// read of what it looks at (a compare tells its caller whether a resource
// exists, and at which version): the Read hook for a compare on one name,
// the List hook for OP_NOTHING_NEWER. A compare on a sealed type is
// refused unless ops (FromOperations). It returns normalized copies.
func (s *Service) prepareCompares(a acl.Authorizer, ops bool, in []*pbresource.Compare) ([]*pbresource.Compare, error) {
	if len(in) > MaxBatchMembers {
		return nil, status.Errorf(codes.ResourceExhausted, "compares: the batch has %d compares, over the limit of %d; split it", len(in), MaxBatchMembers)
	}
	out := make([]*pbresource.Compare, len(in))
	for i, c := range in {
		nc, err := s.prepareCompare(a, ops, c)
		if err != nil {
			return nil, withPrefix(compareField(i), err)
		}
		out[i] = nc
	}
	return out, nil
}

func (s *Service) prepareCompare(a acl.Authorizer, ops bool, c *pbresource.Compare) (*pbresource.Compare, error) {
	if c == nil {
		return nil, NewFieldError("", "a compare is required")
	}
	switch c.GetOp() {
	case pbresource.Compare_OP_NOTHING_NEWER:
		id := c.GetId()
		if id == nil {
			return nil, NewFieldError("id", "is required: its type and tenancy name the range, its name a name prefix")
		}
		if id.GetTenancy().GetNamespace() == ids.WildcardNamespace {
			return nil, NewFieldError("id.tenancy.namespace", "cannot be %q: a compare looks at one namespace", ids.WildcardNamespace)
		}
		if id.GetUid() != "" {
			return nil, NewFieldError("id.uid", "must be empty: OP_NOTHING_NEWER looks at every resource of a name prefix")
		}
		reg, ten, err := s.registry.checkListQuery(id.GetType(), id.GetTenancy(), id.GetName())
		if err != nil {
			return nil, withPrefix("id", renameField(err, "name_prefix", "name"))
		}
		if _, err := storage.CompareSince(c.GetVersion()); err != nil {
			return nil, NewFieldError("version", "%q is not a version: OP_NOTHING_NEWER compares with a version the store gave (a decimal number), or none for an empty range", c.GetVersion())
		}
		if reg.Sealed && !ops {
			return nil, sealedError(reg.Type)
		}
		if err := s.authorizeList(a, reg, ten); err != nil {
			return nil, err
		}
		return &pbresource.Compare{Op: c.GetOp(), Version: c.GetVersion(), Id: &pbresource.ID{Type: reg.Type, Tenancy: ten, Name: id.GetName()}}, nil
	case pbresource.Compare_OP_VERSION, pbresource.Compare_OP_ABSENT, pbresource.Compare_OP_EXISTS:
	default:
		return nil, NewFieldError("op", "%v is not a compare: give OP_VERSION, OP_ABSENT, OP_EXISTS or OP_NOTHING_NEWER", c.GetOp())
	}
	id, reg, err := s.registry.checkID("id", c.GetId())
	if err != nil {
		return nil, err
	}
	switch {
	case c.GetOp() == pbresource.Compare_OP_VERSION && c.GetVersion() == "":
		return nil, NewFieldError("version", "is required: OP_VERSION compares the stored version with it")
	case c.GetOp() != pbresource.Compare_OP_VERSION && c.GetVersion() != "":
		return nil, NewFieldError("version", "must be empty for %v", c.GetOp())
	case c.GetOp() == pbresource.Compare_OP_ABSENT && id.GetUid() != "":
		return nil, NewFieldError("id.uid", "must be empty: OP_ABSENT says that nothing at all is stored under the name")
	}
	if reg.Sealed && !ops {
		return nil, sealedError(reg.Type)
	}
	if err := aclError("read "+ids.String(id), hooks(reg).Read(a, id)); err != nil {
		return nil, err
	}
	return &pbresource.Compare{Op: c.GetOp(), Id: id, Version: c.GetVersion()}, nil
}

// renameField renames a field of a FieldError (the list query's
// name_prefix is a compare's id.name).
func renameField(err error, from, to string) error {
	var fe *FieldError
	if errors.As(err, &fe) && fe.Field == from {
		return &FieldError{Field: to, Reason: fe.Reason}
	}
	return err
}

// namespaceCompares are the compares that make a write's namespaces
// exist in the same step as the write: one OP_EXISTS per namespace other
// than the default that the writes go into, except the namespaces the
// writes themselves create or change.
func namespaceCompares(writes []*pbresource.ID) []*pbresource.Compare {
	written := make(map[string]bool)
	for _, id := range writes {
		if isNamespaceType(id.GetType()) {
			written[id.GetName()] = true
		}
	}
	var out []*pbresource.Compare
	for _, id := range writes {
		ns := id.GetTenancy().GetNamespace()
		if ns == "" || ns == DefaultNamespace || written[ns] {
			continue
		}
		written[ns] = true // one compare per namespace
		out = append(out, &pbresource.Compare{Op: pbresource.Compare_OP_EXISTS, Id: NamespaceID(ns)})
	}
	return out
}

// explainCompareFailure is called when the backend refused a batch for a
// compare: it checks each compare again on strong reads and returns the
// refusal of the first that fails, naming it (the caller's as
// compares[i], Aborted; a namespace's as FailedPrecondition). It returns
// nil when every one holds again, and the write may be retried.
func (s *Service) explainCompareFailure(ctx context.Context, mine, nsChecks []*pbresource.Compare) error {
	for _, c := range nsChecks {
		if err := s.namespaceExists(ctx, c.GetId().GetName()); err != nil {
			return err
		}
	}
	for i, c := range mine {
		var failed error
		if c.GetOp() == pbresource.Compare_OP_NOTHING_NEWER {
			id := c.GetId()
			inRange, err := s.backend.List(ctx, storage.StrongConsistency, id.GetType(), id.GetTenancy(), id.GetName())
			if err != nil {
				return err
			}
			failed = storage.CompareNothingNewer(c, inRange)
		} else {
			stored, err := s.readCurrent(ctx, storage.StrongConsistency, c.GetId())
			if err != nil {
				return err
			}
			failed = storage.ComparePoint(c, stored)
		}
		if failed != nil {
			why := strings.TrimPrefix(failed.Error(), storage.ErrCompareFailed.Error()+": ")
			return status.Errorf(codes.Aborted, "%s: conflict: %v on %s does not hold: %s", compareField(i), c.GetOp(), ids.String(c.GetId()), why)
		}
	}
	return nil
}
