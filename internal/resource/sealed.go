package resource

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
)

// A sealed type (Registration.Sealed) holds secrets, such as the Connect
// CA's signing keys, that live in the replicated state so every server can
// use them, but that no caller outside the server process may ever see.
// Every generic call of the service that names a sealed type (Read, List,
// Watch, Write, WriteBatch and its compares, WriteStatus, WriteStatuses,
// Delete) is refused unless its context carries FromOperations, which only
// code in this process can set; ListByOwner and watches leave sealed
// resources out of what they return. The refusal is PermissionDenied
// rather than FailedPrecondition: no token and no state of the cluster
// makes the call allowed, so it is a matter of authority, and a client
// retrying after a change of state would wait forever.
//
// The check runs before any hook of the type and before the store is
// read, so a refusal says nothing of what is stored and echoes nothing
// of the resource but its type.

// checkSealed refuses a call from outside the process on a sealed type.
func checkSealed(ctx context.Context, reg Registration) error {
	if !reg.Sealed || fromOperations(ctx) {
		return nil
	}
	return sealedError(reg.Type)
}

// checkSealedType is checkSealed for a type not yet resolved: an unknown
// or malformed type passes, for the usual checks to refuse it by field.
func (r *Registry) checkSealedType(ctx context.Context, typ *pbresource.Type) error {
	if typ == nil || fromOperations(ctx) {
		return nil
	}
	reg, ok := r.Resolve(typ)
	if !ok {
		return nil
	}
	return checkSealed(ctx, reg)
}

func sealedError(typ *pbresource.Type) error {
	return status.Errorf(codes.PermissionDenied, "%s is sealed: it holds secrets that only the %s domain's own code inside the server reads and writes; no API serves it", ids.TypeString(typ), typ.GetGroup())
}

// IsSealed reports whether typ is registered as sealed. Faces of the API
// that list types (the HTTP API's "known types") leave sealed ones out.
func (r *Registry) IsSealed(typ *pbresource.Type) bool {
	reg, ok := r.Resolve(typ)
	return ok && reg.Sealed
}
