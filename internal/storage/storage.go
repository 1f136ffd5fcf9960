package storage

import (
	"context"
	"errors"

	pbresource "trellis.dev/trellis/api/resource/v1"
)

// ReadConsistency says how fresh a read must be.
type ReadConsistency int

const (
	// EventualConsistency reads the local copy, which may lag the leader.
	EventualConsistency ReadConsistency = iota
	// StrongConsistency reads state that includes every write acknowledged
	// before the read began (a linearizable read).
	StrongConsistency
)

func (c ReadConsistency) String() string {
	if c == StrongConsistency {
		return "strong"
	}
	return "eventual"
}

var (
	// ErrNotFound: no resource is stored under that id.
	ErrNotFound = errors.New("resource not found")
	// ErrCASFailure: the version given does not match the stored one (or a
	// create found a resource already stored).
	ErrCASFailure = errors.New("version conflict: the resource has changed since the version given")
	// ErrWrongUID: a resource of that name exists but is another incarnation
	// than the uid the caller named.
	ErrWrongUID = errors.New("resource has a different uid: it was deleted and re-created")
	// ErrUnavailable: this server cannot serve the request now, and did
	// nothing that a retry would repeat wrongly: no leader is known or
	// reachable, leadership was lost while the request was in flight, this
	// server has not caught up with the leader since it started, or it is
	// shutting down. The caller may retry, here or at another server.
	ErrUnavailable = errors.New("no cluster leader, or this server has not caught up with it: cannot serve this request right now, retry")
	// ErrWatchTooSlow: the watcher fell too far behind the writers and was
	// cut off. List again and start a new watch.
	ErrWatchTooSlow = errors.New("watch fell behind and was closed: re-list and watch again")
	// ErrIndexTooOld: a watch was asked to resume from an index whose events
	// are no longer kept. List again and start a new watch.
	ErrIndexTooOld = errors.New("watch cannot resume from that index, its events are gone: re-list and watch again")
	// ErrBatchConflict wraps the CAS failure of one member of a batch.
	ErrBatchConflict = errors.New("batch refused")
	// ErrCompareFailed: a compare member of a batch did not hold. Always
	// wrapped together with ErrBatchConflict.
	ErrCompareFailed = errors.New("compare failed")
)

// Backend is the storage contract. See the package comment for its rules.
type Backend interface {
	// Read returns the resource with the id's type, tenancy and name. When
	// the id carries a uid that differs from the stored one, it fails with
	// ErrWrongUID; when nothing is stored, with ErrNotFound.
	Read(ctx context.Context, consistency ReadConsistency, id *pbresource.ID) (*pbresource.Resource, error)

	// WriteCAS stores res. res.Version must equal the stored version, or be
	// empty when nothing is stored under that name (a create). The stored
	// copy, with its new version, is returned. An update whose uid differs
	// from the stored one fails with ErrWrongUID.
	WriteCAS(ctx context.Context, res *pbresource.Resource) (*pbresource.Resource, error)

	// WriteBatch applies several WriteCAS operations atomically: every one
	// is checked before any is applied, and either all are stored or none
	// (the error wraps ErrBatchConflict and names the member that failed).
	// A batch may not name one resource twice.
	//
	// compares are members that only compare (see pbresource.Compare):
	// they are checked in the same step, against the state before the
	// writes, and store nothing. When one does not hold, nothing is
	// written and the error wraps ErrBatchConflict and ErrCompareFailed
	// and names it ("compare 1 (...)"). A batch of compares alone writes
	// nothing and returns no resources.
	WriteBatch(ctx context.Context, resources []*pbresource.Resource, compares ...*pbresource.Compare) ([]*pbresource.Resource, error)

	// DeleteCAS deletes the resource when version matches the stored one
	// (an empty version deletes whatever is stored). Deleting something that
	// is not stored, or naming a uid that is no longer stored, is not an
	// error.
	DeleteCAS(ctx context.Context, id *pbresource.ID, version string) error

	// List returns the resources of a type in a tenancy (namespace "*" for
	// all) whose names start with namePrefix, ordered by namespace and name.
	List(ctx context.Context, consistency ReadConsistency, typ *pbresource.Type, tenancy *pbresource.Tenancy, namePrefix string) ([]*pbresource.Resource, error)

	// ListByOwner returns the resources whose owner is id (matching uid too).
	ListByOwner(ctx context.Context, id *pbresource.ID) ([]*pbresource.Resource, error)

	// WatchList returns a watch on the resources List would return. With
	// sinceIndex 0, it first yields an upsert for every current resource and
	// then an END_OF_SNAPSHOT event; with sinceIndex > 0, it yields every
	// change after that index and then END_OF_SNAPSHOT, or fails with
	// ErrIndexTooOld. After that it yields every change, in index order.
	WatchList(ctx context.Context, typ *pbresource.Type, tenancy *pbresource.Tenancy, namePrefix string, sinceIndex uint64) (Watch, error)
}

// ServerWatchBuffer is the buffer a server's own watchers ask for
// (WithWatchBuffer): as many events as a store keeps for resuming
// watches. A burst of batch writes (a deployment placing 5,000 tasks is
// five batches of 1,000, applied back to back) outruns the default
// buffer of a watcher that is not cut off for being slow, only for being
// scheduled late.
const ServerWatchBuffer = 1 << 14

type staleKey struct{}

// WithStale lets an eventual read or watch opened with the returned
// context be answered from this server's state even before the server has
// caught up with a leader since it started (a restarted server replays
// its log only as the leader tells it what is committed). Without it, such
// a read waits for the catch-up, for a bounded time, and fails with
// ErrUnavailable rather than answer with the past. For callers that want
// an answer anyway: diagnostics, and people who say ?stale.
func WithStale(ctx context.Context) context.Context {
	return context.WithValue(ctx, staleKey{}, true)
}

// StaleFrom reports whether ctx asks for stale reads (WithStale).
func StaleFrom(ctx context.Context) bool {
	v, _ := ctx.Value(staleKey{}).(bool)
	return v
}

type watchBufferKey struct{}

// WithWatchBuffer asks a WatchList opened with the returned context to
// hold up to n events unread before it is cut off with ErrWatchTooSlow,
// instead of the store's default. For in-process watchers that must keep
// up with bursts: the controllers' informers and the task hub.
func WithWatchBuffer(ctx context.Context, n int) context.Context {
	return context.WithValue(ctx, watchBufferKey{}, n)
}

// WatchBufferFrom is the buffer asked for with WithWatchBuffer; 0 for the
// store's default.
func WatchBufferFrom(ctx context.Context) int {
	n, _ := ctx.Value(watchBufferKey{}).(int)
	return max(n, 0)
}

type progressMarksKey struct{}

// WithProgressMarks asks a WatchList opened with the returned context to
// send, after each change of the store that its own events do not reach,
// a progress mark: an END_OF_SNAPSHOT event at the store's new index,
// which proves, as the first END_OF_SNAPSHOT does, that the watcher has
// been handed every change up to it. A watcher that must know how current
// its view is, and not only the last change it matched, asks for them: the
// task hub, which tells agents the index their view is as of. Marks are
// dropped, never cut a watcher off, when its buffer is full. Only
// in-process watches on a server's own store carry them.
func WithProgressMarks(ctx context.Context) context.Context {
	return context.WithValue(ctx, progressMarksKey{}, true)
}

// WatchOptions are what a WatchList's context asks of the store.
type WatchOptions struct {
	Buffer        int  // WithWatchBuffer; 0 for the store's default
	ProgressMarks bool // WithProgressMarks
}

// WatchOptionsFrom reads the watch options ctx carries.
func WatchOptionsFrom(ctx context.Context) WatchOptions {
	marks, _ := ctx.Value(progressMarksKey{}).(bool)
	return WatchOptions{Buffer: WatchBufferFrom(ctx), ProgressMarks: marks}
}

// Watch is a stream of events. Next blocks until an event, the end of ctx,
// or the watch's end (ErrWatchTooSlow when the watcher fell behind).
type Watch interface {
	Next(ctx context.Context) (*pbresource.WatchEvent, error)
	Close()
}

// Leadership is implemented by backends that know whether this process may
// run controllers (the Raft leader; the in-memory backend always may).
type Leadership interface {
	// LeaderCh yields true when this process becomes the leader and false
	// when it stops being one. The first value is the current state.
	LeaderCh() <-chan bool
}
