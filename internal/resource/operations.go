package resource

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"trellis.dev/trellis/internal/ids"
)

// Some types are written only through their domain's own operations
// (Registration.WrittenThrough): an Environment, say, whose create checks
// other environments and writes its first version with it. The generic
// Write and WriteBatch refuse them unless the call's context says it comes
// from those operations. The mark is a context value: only code in this
// process can set it, never a gRPC or HTTP caller.

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
