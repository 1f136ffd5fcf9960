package httpapi

import (
	"context"
	"errors"
	"net/http"
	"trellis.dev/trellis/internal/acl"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/storage"
)

// statusClientClosed is nginx's convention for a request whose client went
// away; only metrics and logs ever see it.
const statusClientClosed = 499

// httpError maps an error to an HTTP status and the JSON error body. The
// resource API reports gRPC status errors; this file's own refusals and the
// storage sentinels are recognised too, so nothing reaches a client as a
// bare 500 unless it is one.
func httpError(err error) (int, wire.Error) {
	switch {
	case errors.Is(err, ErrTooLarge):
		return http.StatusRequestEntityTooLarge, wire.Error{Error: err.Error(), Code: wire.CodeTooLarge}
	case errors.Is(err, ErrBadInput):
		return http.StatusBadRequest, wire.Error{Error: err.Error(), Code: wire.CodeInvalidArgument}
	}
	if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
		code, body := grpcToHTTP(st.Code())
		return code, wire.Error{Error: st.Message(), Code: body}
	}
	code, body := http.StatusInternalServerError, wire.CodeInternal
	switch {
	case errors.Is(err, storage.ErrNotFound):
		code, body = http.StatusNotFound, wire.CodeNotFound
	case errors.Is(err, storage.ErrCASFailure), errors.Is(err, storage.ErrWrongUID), errors.Is(err, storage.ErrBatchConflict):
		code, body = http.StatusConflict, wire.CodeConflict
	case errors.Is(err, storage.ErrUnavailable):
		code, body = http.StatusServiceUnavailable, wire.CodeUnavailable
	case errors.Is(err, storage.ErrWatchTooSlow), errors.Is(err, storage.ErrIndexTooOld):
		code, body = http.StatusGone, wire.CodeGone
	case errors.Is(err, acl.ErrPermissionDenied):
		code, body = http.StatusForbidden, wire.CodePermissionDenied
	case errors.Is(err, acl.ErrTokenRequired):
		code, body = http.StatusUnauthorized, wire.CodeUnauthenticated
	case errors.Is(err, context.Canceled):
		code, body = statusClientClosed, wire.CodeCanceled
	case errors.Is(err, context.DeadlineExceeded):
		code, body = http.StatusGatewayTimeout, wire.CodeDeadlineExceeded
	}
	return code, wire.Error{Error: err.Error(), Code: body}
}

// grpcToHTTP is the one table from the resource API's codes to HTTP.
func grpcToHTTP(c codes.Code) (int, string) {
	switch c {
	case codes.InvalidArgument:
		return http.StatusBadRequest, wire.CodeInvalidArgument
	case codes.OutOfRange:
		// The resource service's one meaning of OutOfRange: a watch must
		// list again (it fell behind, or cannot resume from that index).
		return http.StatusGone, wire.CodeGone
	case codes.Unauthenticated:
		return http.StatusUnauthorized, wire.CodeUnauthenticated
	case codes.PermissionDenied:
		return http.StatusForbidden, wire.CodePermissionDenied
	case codes.NotFound:
		return http.StatusNotFound, wire.CodeNotFound
	case codes.Aborted, codes.AlreadyExists:
		return http.StatusConflict, wire.CodeConflict
	case codes.FailedPrecondition:
		return http.StatusConflict, wire.CodeFailedPrecondition
	case codes.ResourceExhausted:
		return http.StatusRequestEntityTooLarge, wire.CodeTooLarge
	case codes.Canceled:
		return statusClientClosed, wire.CodeCanceled
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout, wire.CodeDeadlineExceeded
	case codes.Unavailable:
		return http.StatusServiceUnavailable, wire.CodeUnavailable
	case codes.Unimplemented:
		return http.StatusNotImplemented, wire.CodeUnimplemented
	}
	return http.StatusInternalServerError, wire.CodeInternal
}
