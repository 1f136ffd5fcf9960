package resource

import (
	"context"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/storage"
)

// API is the resource service as in-process callers (the HTTP API, the
// controllers) use it. Its errors are gRPC status errors, so that every face
// of the service reports the same codes: InvalidArgument for bad input,
// NotFound, Aborted for a version conflict, ResourceExhausted for a resource
// over the size limit, PermissionDenied, Unavailable when there is no leader
// (retry), FailedPrecondition for requests the current state forbids.
//
// The caller's ACL token travels in the context (ContextWithToken).
type API interface {
	Read(context.Context, *pbresource.ReadRequest) (*pbresource.ReadResponse, error)
	Write(context.Context, *pbresource.WriteRequest) (*pbresource.WriteResponse, error)
	WriteBatch(context.Context, *pbresource.WriteBatchRequest) (*pbresource.WriteBatchResponse, error)
	WriteStatus(context.Context, *pbresource.WriteStatusRequest) (*pbresource.WriteStatusResponse, error)
	WriteStatuses(context.Context, *pbresource.WriteStatusesRequest) (*pbresource.WriteStatusesResponse, error)
	List(context.Context, *pbresource.ListRequest) (*pbresource.ListResponse, error)
	ListByOwner(context.Context, *pbresource.ListByOwnerRequest) (*pbresource.ListByOwnerResponse, error)
	Delete(context.Context, *pbresource.DeleteRequest) (*pbresource.DeleteResponse, error)
	// Watch opens a WatchList stream; see storage.Backend.WatchList. The
	// watch's errors are gRPC status errors too.
	Watch(context.Context, *pbresource.WatchListRequest) (storage.Watch, error)
}

type tokenKey struct{}

// ContextWithToken attaches the caller's ACL token to ctx.
func ContextWithToken(ctx context.Context, token string) context.Context {
	return context.WithValue(ctx, tokenKey{}, token)
}

// TokenFromContext returns the token ContextWithToken attached, or "".
func TokenFromContext(ctx context.Context) string {
	tok, _ := ctx.Value(tokenKey{}).(string)
	return tok
}

// TokenMetadataKey is the gRPC metadata key that carries the ACL token.
const TokenMetadataKey = "x-trellis-token"
