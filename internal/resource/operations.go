package resource

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
)

// Some types are written only through their domain's own operations
// (Registration.WrittenThrough): an Environment, say, whose create checks
// other environments and writes its first version with it. The generic
// Write and WriteBatch refuse them unless the call's context says it comes
// from those operations. The mark is a context value: only code in this
// process can set it, never a gRPC or HTTP caller.
//
// Such a type is deleted through its operations too, for the same reason:
// an Environment's delete refuses while a deployment is in progress and
// stops its tasks first; the active CA root is never deleted, since every
// leaf chains to it. So the generic Delete, over gRPC, over HTTP or in
// process, refuses them, naming the operation to use
// (Registration.DeletedThrough), unless the call is FromOperations: the
// domain's own operations and controllers, the CA manager's prune, the
// owner reaper. A batch only writes, so it cannot delete one. And what an
// owner's deletion cascades to (the reaper) is one of these only when the
// owner is one too, since only the operations write them, owners
// included: deleting the owner is refused first.

type operationsKey struct{}

// FromOperations marks ctx as a call from a domain's own operations or
// controllers, which may write the types they own that are written only
// through them.
func FromOperations(ctx context.Context) context.Context {
	return context.WithValue(ctx, operationsKey{}, true)
}

func fromOperations(ctx context.Context) bool {
	v, _ := ctx.Value(operationsKey{}).(bool)
	return v
}

// checkWrittenThrough refuses a generic write of a type written only
// through its own operations.
func checkWrittenThrough(ctx context.Context, reg Registration) error {
	if reg.WrittenThrough == "" || fromOperations(ctx) {
		return nil
	}
	return status.Errorf(codes.FailedPrecondition, "%s is written only through its own operations (%s), which check it against the others of its kind and version it; use them", ids.TypeString(reg.Type), reg.WrittenThrough)
}

// checkDeletedThrough refuses a generic delete of a type written only
// through its own operations: they delete it too. stored is the resource
// the delete names, nil when none is stored; the refusal does not depend
// on it, only its words may (Registration.DeleteRefusal).
func checkDeletedThrough(ctx context.Context, reg Registration, stored *pbresource.Resource) error {
	if reg.WrittenThrough == "" || fromOperations(ctx) {
		return nil
	}
	if reg.DeleteRefusal != nil && stored != nil {
		if err := reg.DeleteRefusal(stored); err != nil {
			return err
		}
	}
	how := reg.DeletedThrough
	if how == "" {
		how = reg.WrittenThrough
	}
	return status.Errorf(codes.FailedPrecondition, "%s is deleted only through its own operations, which check and tear down what the generic delete cannot: %s", ids.TypeString(reg.Type), how)
}

// DeletedThroughOperations reports whether the generic Delete refuses
// every resource of the type unless the call is FromOperations: a type
// written through its operations, a sealed one or a permanent one.
func (r Registration) DeletedThroughOperations() bool {
	return r.WrittenThrough != "" || r.Sealed || r.Permanent
}
