package resource

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"trellis.dev/trellis/internal/acl"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"trellis.dev/trellis/internal/storage"
)

func TestToStatus(t *testing.T) {
	var logs bytes.Buffer
	m := errorMapper{log: slog.New(slog.NewTextHandler(&logs, nil))}
	cases := []struct {
		err  error
		code codes.Code
		msg  string
	}{
		{NewFieldError("id.name", "bad"), codes.InvalidArgument, "id.name: bad"},
		{fmt.Errorf("resources[2]: %w", &sizeError{size: 2 << 20}), codes.ResourceExhausted, "resources[2]: resource is 2097152 bytes encoded, over the limit of 1048576 bytes"},
		{fmt.Errorf("x: %w", acl.ErrPermissionDenied), codes.PermissionDenied, "x: permission denied"},
		{fmt.Errorf("demo/v1/W/default/a: %w", storage.ErrNotFound), codes.NotFound, "demo/v1/W/default/a: resource not found"},
		{storage.ErrCASFailure, codes.Aborted, "re-read the resource and retry"},
		{storage.ErrWrongUID, codes.Aborted, "deleted and re-created"},
		{fmt.Errorf("%w: member 3", storage.ErrBatchConflict), codes.Aborted, "batch refused"},
		{fmt.Errorf("forward: %w", storage.ErrUnavailable), codes.Unavailable, "no cluster leader"},
		{storage.ErrWatchTooSlow, codes.OutOfRange, "re-list"},
		{storage.ErrIndexTooOld, codes.OutOfRange, "re-list"},
		{fmt.Errorf("read: %w", context.Canceled), codes.Canceled, "canceled"},
		{context.DeadlineExceeded, codes.DeadlineExceeded, "deadline"},
		{status.Error(codes.FailedPrecondition, "as is"), codes.FailedPrecondition, "as is"},
		{errors.New("disk on fire at /var/lib/secret"), codes.Internal, "op failed: internal error"},
	}
	for _, c := range cases {
		err := m.toStatus("op", c.err)
		st, _ := status.FromError(err)
		if st.Code() != c.code || !strings.Contains(st.Message(), c.msg) {
			t.Errorf("toStatus(%v) = %v %q, want %v containing %q", c.err, st.Code(), st.Message(), c.code, c.msg)
		}
	}
	if m.toStatus("op", nil) != nil {
		t.Error("nil error mapped to an error")
	}
	if !strings.Contains(logs.String(), "disk on fire") {
		t.Error("the internal error was not logged")
	}
	if s := m.toStatus("op", errors.New("disk on fire at /var/lib/secret")).Error(); strings.Contains(s, "secret") {
		t.Errorf("internal detail leaked: %s", s)
	}
}
