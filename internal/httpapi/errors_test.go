package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
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
		{storage.ErrUnavailable, http.StatusServiceUnavailable, wire.CodeUnavailable},
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

func TestCheckEscapes(t *testing.T) {
	for _, tc := range []struct {
		body string
		want string // "" when accepted
	}{
		{`{"a":"plain"}`, ""},
		{`{"a":"\u00e9 \ud83d\ude00 \uD83D\uDE00"}`, ""}, // a BMP escape, a surrogate pair in either case
		{`{"a":"\\ud800"}`, ""},                          // an escaped backslash, then text
		{`{"a":"\"\ud800"}`, "at byte 9: \\ud800"},       // an escaped quote does not end the string
		{`{"\ud800":1}`, "at byte 3: \\ud800"},           // keys are strings too
		{`{"a":"\ud800"}`, "at byte 7: \\ud800 is an unpaired UTF-16 surrogate: a high surrogate must be followed by a low one"},
		{`{"a":"\udbff\ud800"}`, "at byte 7: \\udbff"}, // two highs
		{`{"a":"\ud800\u00e9"}`, "at byte 7: \\ud800"}, // a high, then no low
		{`{"a":"\ud800"`, "at byte 7"},                 // cut short
		{`{"a":"\udfff"}`, "at byte 7: \\udfff is an unpaired UTF-16 surrogate: a low surrogate must follow a high one"},
		{`{"a":"\ud83d\ude00\ude00"}`, "at byte 19: \\ude00"}, // a pair, then a stray low
		{`{"a":"\u12"}`, ""}, // not an escape: the decoder's to report
		{`{"a":"\ud8`, ""},
		{`"\ud800" outside an object`, "at byte 2"},
	} {
		err := checkEscapes([]byte(tc.body))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want it accepted", tc.body, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrBadInput)):
			t.Errorf("%s: %v, want a bad input containing %q", tc.body, err, tc.want)
		}
	}
}

func TestCheckVersion(t *testing.T) {
	for v, ok := range map[string]bool{"": true, "0": true, "42": true, "18446744073709551615": true, "abc": false, "-1": false, " 4": false, "4.0": false, "18446744073709551616": false} {
		if err := checkVersion("version", v); (err == nil) != ok {
			t.Errorf("checkVersion(%q) = %v, want ok %v", v, err, ok)
		}
	}
}
