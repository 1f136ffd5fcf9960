package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/storage"
)

func TestHTTPError(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
		code   string
	}{
		{inputError("data", "bad"), http.StatusBadRequest, wire.CodeInvalidArgument},
		{&FieldError{Field: "body", Reason: "big", kind: ErrTooLarge}, http.StatusRequestEntityTooLarge, wire.CodeTooLarge},
		{status.Error(codes.InvalidArgument, "x"), http.StatusBadRequest, wire.CodeInvalidArgument},
		{status.Error(codes.NotFound, "x"), http.StatusNotFound, wire.CodeNotFound},
		{status.Error(codes.Aborted, "x"), http.StatusConflict, wire.CodeConflict},
		{status.Error(codes.AlreadyExists, "x"), http.StatusConflict, wire.CodeConflict},
		{status.Error(codes.FailedPrecondition, "x"), http.StatusConflict, wire.CodeFailedPrecondition},
		{status.Error(codes.ResourceExhausted, "x"), http.StatusRequestEntityTooLarge, wire.CodeTooLarge},
		{status.Error(codes.PermissionDenied, "x"), http.StatusForbidden, wire.CodePermissionDenied},
		{status.Error(codes.Unauthenticated, "x"), http.StatusUnauthorized, wire.CodeUnauthenticated},
		{status.Error(codes.Unavailable, "x"), http.StatusServiceUnavailable, wire.CodeUnavailable},
		{status.Error(codes.OutOfRange, "x"), http.StatusGone, wire.CodeGone},
		{status.Error(codes.DeadlineExceeded, "x"), http.StatusGatewayTimeout, wire.CodeDeadlineExceeded},
		{status.Error(codes.Unimplemented, "x"), http.StatusNotImplemented, wire.CodeUnimplemented},
		{status.Error(codes.Internal, "x"), http.StatusInternalServerError, wire.CodeInternal},
		{status.Error(codes.DataLoss, "x"), http.StatusInternalServerError, wire.CodeInternal},
		// Errors that are not gRPC statuses: the storage sentinels.
		{fmt.Errorf("read: %w", storage.ErrNotFound), http.StatusNotFound, wire.CodeNotFound},
		{storage.ErrCASFailure, http.StatusConflict, wire.CodeConflict},
		{storage.ErrInconsistent, http.StatusServiceUnavailable, wire.CodeUnavailable},
		{storage.ErrIndexTooOld, http.StatusGone, wire.CodeGone},
		{errors.New("boom"), http.StatusInternalServerError, wire.CodeInternal},
	} {
		st, body := httpError(tc.err)
		if st != tc.status || body.Code != tc.code || body.Error == "" {
			t.Errorf("httpError(%v) = %d %+v, want %d %s", tc.err, st, body, tc.status, tc.code)
		}
	}
}

func TestCleanProtoError(t *testing.T) {
	for _, in := range []string{
		"proto: (line 1:16): invalid value for string field description: 5",
		"proto:\u00a0(line 1:16): invalid value for string field description: 5",
	} {
		got := cleanProtoError(errors.New(in))
		if got != "invalid value for string field description: 5" {
			t.Errorf("cleanProtoError(%q) = %q", in, got)
		}
	}
}

func TestParseQuery(t *testing.T) {
	q, err := parseQuery(map[string][]string{"watch": {""}, "index": {"7"}, "namespace": {"*"}}, "watch", "index", "namespace")
	if err != nil || !q.watch || q.index != 7 || q.namespace != "*" {
		t.Fatalf("parseQuery = %+v, %v", q, err)
	}
	if _, err := parseQuery(map[string][]string{"x": {"1"}}); err == nil || err.Error() != `query: unknown parameter "x" (this path takes none)` {
		t.Fatalf("no parameters allowed: %v", err)
	}
}
