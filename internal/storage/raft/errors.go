package raft

import (
	"errors"
	"fmt"

	pbstorage "trellis.dev/trellis/api/storage/v1"
	"trellis.dev/trellis/internal/storage"
)

var (
	// ErrNotLeader: this server is not the Raft leader (or knows no leader
	// to forward to) and did nothing. Leader-only calls fail with it; the
	// storage.Backend methods retry it until a leader answers or their hold
	// time ends, and then fail with storage.ErrUnavailable.
	ErrNotLeader = errors.New("not the raft leader")
	// ErrOutcomeUnknown: a write was in flight when leadership changed, the
	// caller gave up or the server stopped; it may or may not have been
	// committed. Always wrapped together with storage.ErrUnavailable: read
	// the resource back before retrying a write that is not idempotent.
	ErrOutcomeUnknown = errors.New("the write may or may not have been committed")
	// ErrInvalidRequest: a request this backend cannot put into the log
	// (a missing id, type or name). Nothing was written.
	ErrInvalidRequest = errors.New("invalid storage request")
	// ErrShutdown: the backend was shut down. It wraps
	// storage.ErrUnavailable: another server may serve the request.
	ErrShutdown = fmt.Errorf("%w: raft storage is shut down", storage.ErrUnavailable)
	// ErrBadSnapshot: a snapshot stream is corrupt, truncated or of an
	// unknown format. Nothing was restored.
	ErrBadSnapshot = errors.New("bad snapshot")
)

// errorKinds maps the sentinels that cross the wire to their proto kinds.
// Order matters only for the order of kinds in a message.
var errorKinds = []struct {
	err  error
	kind pbstorage.Error_Kind
}{
	{ErrNotLeader, pbstorage.Error_NOT_LEADER},
	{storage.ErrNotFound, pbstorage.Error_NOT_FOUND},
	{storage.ErrCASFailure, pbstorage.Error_CAS_FAILURE},
	{storage.ErrWrongUID, pbstorage.Error_WRONG_UID},
	{storage.ErrBatchConflict, pbstorage.Error_BATCH_CONFLICT},
	{storage.ErrCompareFailed, pbstorage.Error_COMPARE_FAILED},
	{storage.ErrUnavailable, pbstorage.Error_UNAVAILABLE},
	{ErrOutcomeUnknown, pbstorage.Error_OUTCOME_UNKNOWN},
	{ErrInvalidRequest, pbstorage.Error_INVALID},
	{ErrBadSnapshot, pbstorage.Error_BAD_SNAPSHOT},
}

// encodeError turns err into its wire form: its message and every sentinel
// it wraps.
func encodeError(err error) *pbstorage.Error {
	if err == nil {
		return nil
	}
	e := &pbstorage.Error{Message: err.Error()}
	for _, k := range errorKinds {
		if errors.Is(err, k.err) {
			e.Kinds = append(e.Kinds, k.kind)
		}
	}
	return e
}

// decodeError rebuilds an error from its wire form: same message, and
// errors.Is matches the same sentinels. Kinds this version does not know
// are dropped.
func decodeError(e *pbstorage.Error) error {
	if e == nil {
		return nil
	}
	re := &remoteError{msg: e.GetMessage()}
	for _, kind := range e.GetKinds() {
		for _, k := range errorKinds {
			if k.kind == kind {
				re.errs = append(re.errs, k.err)
			}
		}
	}
	if re.msg == "" {
		re.msg = "error from the leader"
	}
	return re
}

// remoteError is an error the leader reported.
type remoteError struct {
	msg  string
	errs []error
}

func (e *remoteError) Error() string   { return e.msg }
func (e *remoteError) Unwrap() []error { return e.errs }

// notLeader is ErrNotLeader with the reason.
func notLeader(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrNotLeader, fmt.Sprintf(format, args...))
}

// outcomeUnknown reports a write whose fate is unknown.
func outcomeUnknown(why string, cause error) error {
	return fmt.Errorf("%w: %s; %w: %w", storage.ErrUnavailable, why, ErrOutcomeUnknown, cause)
}

// invalid reports a request that cannot go into the log.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidRequest, fmt.Sprintf(format, args...))
}
