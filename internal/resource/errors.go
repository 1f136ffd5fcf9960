package resource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"trellis.dev/trellis/internal/acl"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"trellis.dev/trellis/internal/storage"
)

// FieldError is a refusal of bad input that names the field at fault, as a
// path from the request's resource ("id.name", "data.description",
// "metadata[\"app\"]"). The service reports it as InvalidArgument and, for a
// batch member, prefixes the member ("resources[3].id.name"). Validate and
// Mutate hooks should return one (or wrap one) to name their field.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Reason
	}
	return e.Field + ": " + e.Reason
}

// NewFieldError returns a FieldError with a formatted reason.
// GRPCStatus makes a FieldError an InvalidArgument status wherever it
// travels (HTTP maps it to 400).
func (e *FieldError) GRPCStatus() *status.Status {
	return status.New(codes.InvalidArgument, e.Error())
}

func NewFieldError(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// joinField joins a prefix and a field path: "resources[3]" + "id.name",
// "data" + "[2].port" (indexes attach without a dot).
func joinField(prefix, field string) string {
	switch {
	case prefix == "":
		return field
	case field == "":
		return prefix
	case field[0] == '[':
		return prefix + field
	}
	return prefix + "." + field
}

// withPrefix re-roots the fields an error names under prefix (a batch
// member). Errors that name no field get the prefix as their subject.
func withPrefix(prefix string, err error) error {
	if prefix == "" || err == nil {
		return err
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		return &FieldError{Field: joinField(prefix, fe.Field), Reason: fe.Reason}
	}
	if st, ok := status.FromError(err); ok {
		return status.Error(st.Code(), prefix+": "+st.Message())
	}
	return fmt.Errorf("%s: %w", prefix, err)
}

// NeedsRelist reports whether a watch (or the request opening it) ended
// because the watcher must list again and start a new watch: it fell behind
// the writers, or the index it asked to resume from is no longer kept. The
// service reports both as codes.OutOfRange, and uses that code for nothing
// else, so that clients can tell "re-list" apart from every other failure.
func NeedsRelist(err error) bool {
	return status.Code(err) == codes.OutOfRange
}

// errorMapper turns internal errors into gRPC status errors, logging the
// ones whose detail must not reach the caller.
type errorMapper struct{ log *slog.Logger }

// toStatus maps an error to a gRPC status error. Errors that already are
// status errors pass through unchanged.
func (m errorMapper) toStatus(op string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	// A FieldError is a status already (InvalidArgument, see GRPCStatus).
	var se *sizeError
	switch {
	case errors.As(err, &se):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.Is(err, acl.ErrPermissionDenied):
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.Is(err, storage.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, storage.ErrCASFailure), errors.Is(err, storage.ErrWrongUID), errors.Is(err, storage.ErrBatchConflict):
		return status.Error(codes.Aborted, err.Error()+": re-read the resource and retry")
	case errors.Is(err, storage.ErrUnavailable):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, storage.ErrWatchTooSlow), errors.Is(err, storage.ErrIndexTooOld):
		return status.Error(codes.OutOfRange, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "request canceled")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "request deadline exceeded")
	}
	m.log.Error("resource service: internal error", "op", op, "err", err)
	return status.Errorf(codes.Internal, "%s failed: internal error (logged on the server)", op)
}
