package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/backoff"
	"trellis.dev/trellis/internal/ids"
)

// Request names the resource a Reconciler is asked to converge.
//
// Requests are keyed by the whole id, uid included: two requests with equal
// ids are one queue item. The mappers of this package (MapSelf, MapOwner,
// MapReferencing) clear the uid, so that one name is one item whatever its
// incarnation and the reconciler reads the current one; a mapper that keeps
// the uid (the owner reaper does, to reap the owned resources of a deleted
// incarnation) asks for one reconcile per incarnation.
type Request struct {
	ID *pbresource.ID
}

func (r Request) String() string {
	s := ids.String(r.ID)
	if uid := r.ID.GetUid(); uid != "" {
		s += " (uid " + uid + ")"
	}
	return s
}

// Reconciler converges the world onto one resource.
//
// The contract:
//
//   - Reconcile is level-triggered. It is told which resource to look at,
//     not what changed: it reads the current state (the resource may be gone,
//     which is a state like any other) and acts on what it finds. Several
//     changes queued before it runs yield one call.
//   - Reconcile is idempotent: calling it twice on the same state does what
//     calling it once does. It may be called at any time, also when nothing
//     changed (on every resync and on every gain of leadership).
//   - Reconcile is never called concurrently for one Request; different
//     requests run concurrently up to the controller's Workers.
//   - Returning nil means converged. Any retry counter of the request is
//     reset.
//   - Returning RequeueAfter(d) means converged for now, run again after d
//     (or sooner, when something changes). The retry counter is reset.
//   - Returning Terminal(err) means the request cannot succeed as things
//     are: the error is logged and counted, and the request is not retried
//     until a change maps to it again or the next resync.
//   - Returning any other error means try again: the request is queued again
//     after a per-request exponential backoff with jitter, which grows with
//     each consecutive failure up to the controller's Backoff.Max.
//   - A panic is recovered, logged with its stack, and treated as an error.
//   - With the controller's Pacing set, no run of a request starts before
//     the pause its previous run earned is over; a RequeueAfter or a retry
//     due sooner waits for it.
//   - ctx ends when this server loses leadership or shuts down; Reconcile
//     should return promptly then. Writes should be compare-and-swap on the
//     version it read, so that a reconcile that lost a race fails (and is
//     retried on fresh state) instead of overwriting a newer write.
type Reconciler interface {
	Reconcile(ctx context.Context, req Request) error
}

// ReconcileFunc adapts a function to a Reconciler.
type ReconcileFunc func(ctx context.Context, req Request) error

// Reconcile calls f.
func (f ReconcileFunc) Reconcile(ctx context.Context, req Request) error { return f(ctx, req) }

// RequeueAfterError asks for another reconcile after a delay; see
// RequeueAfter.
type RequeueAfterError struct {
	After time.Duration
}

func (e *RequeueAfterError) Error() string {
	return fmt.Sprintf("requeue after %s", e.After)
}

// RequeueAfter is what a Reconciler returns to be run again after d, even
// though it succeeded (to poll something outside the store, or to act when a
// deadline passes). A change that maps to the request runs it sooner; the
// later run still happens.
func RequeueAfter(d time.Duration) error { return &RequeueAfterError{After: d} }

// TerminalError marks a reconcile error that retrying cannot fix; see
// Terminal.
type TerminalError struct {
	Err error
}

func (e *TerminalError) Error() string { return "terminal: " + e.Err.Error() }
func (e *TerminalError) Unwrap() error { return e.Err }

// Terminal wraps err so that the request is not retried: the error is
// logged and counted, and the request runs again only when a change maps to
// it or on the next resync. Terminal(nil) is nil.
func Terminal(err error) error {
	if err == nil {
		return nil
	}
	return &TerminalError{Err: err}
}

// Event is a change the Manager saw on a watched type: the resource as
// written, or, for a delete, as it was last stored. A delete the Manager
// learnt of by listing again (its watch could not resume) carries only the
// resource's id, owner and version.
type Event struct {
	Resource *pbresource.Resource
	Deleted  bool
}

// Mapper turns a change of a watched resource into the requests it calls
// for. It runs on the watch's path, so it must be quick and do no I/O; what
// it needs to know beyond the event it asks the Lookup. A request of another
// type than the controller's managed type is dropped (unless the controller
// has no managed type).
type Mapper func(ev Event, look Lookup) []Request

// Lookup is what a Mapper may consult besides its event. It is fed by the
// Manager's watches, so it may lag the store a little; a reconciler reads
// the store itself.
type Lookup interface {
	// Referencing returns the ids (uid cleared) of the managed resources
	// whose Controller.References name id (by type, namespace and name).
	Referencing(id *pbresource.ID) []*pbresource.ID
	// Cache is the Manager's cache: the types of Controller.Cached, with
	// their indexes, holding the event being mapped already.
	Cache() *Cache
}

// Watch declares a type a controller watches and how its changes map to
// requests.
type Watch struct {
	Type *pbresource.Type
	Map  Mapper
}

// Backoff bounds the delay before a failed request runs again: Base after
// the first failure, doubling with each further one, never above Max, each
// delay drawn at random from its upper half (jitter, so that requests that
// failed together do not retry together). It is the backoff package's
// policy, named here so that a Controller is configured without importing
// that package.
type Backoff = backoff.Policy

// Defaults used when a Controller leaves them zero.
const (
	DefaultBackoffBase = 50 * time.Millisecond
	DefaultBackoffMax  = 5 * time.Minute
	DefaultWorkers     = 1
)

// Controller declares a controller to the Manager.
type Controller struct {
	// Name identifies the controller in logs, metrics and the status key it
	// writes. Required, unique within a Manager.
	Name string
	// ManagedType is the type the controller reconciles. Its changes are
	// mapped with MapSelf unless Watches names the type with another mapper.
	// A controller with no managed type (the owner reaper, which spans every
	// type) is driven by its Watches alone.
	ManagedType *pbresource.Type
	// Watches are further types whose changes map to requests.
	Watches []Watch
	// References, when set, names the resources a managed resource refers
	// to. The Manager keeps the reverse index that Lookup.Referencing and
	// MapReferencing read. Needs a ManagedType.
	References func(*pbresource.Resource) []*pbresource.ID
	// Cached declares the types the controller reads from the Manager's
	// Cache, and the indexes it looks them up by; see Cache for what a
	// reader may assume. Its workers start each term once these types are
	// listed into the cache.
	Cached []CachedType
	// Reconciler converges one resource. Required.
	Reconciler Reconciler
	// ResyncPeriod, when positive, is how often every resource of every
	// watched type (the managed one included) is listed from the store and
	// mapped as if it had just been written, so that whatever was missed is
	// repaired. A resync also happens on every gain of leadership.
	ResyncPeriod time.Duration
	// Workers bounds the reconciles in flight at once (DefaultWorkers when
	// zero).
	Workers int
	// Backoff bounds retry delays (the defaults where zero).
	Backoff Backoff
	// Pacing, when its Factor is set, bounds the share of time each
	// request works under a stream of changes (see Pacing).
	Pacing Pacing
	// OnStart, when set, is called each time this server starts the
	// controller (every gain of leadership), before its watches open and
	// before any reconcile. A controller that keeps state fed by its
	// mappers drops it here: what it saw in an earlier term may have
	// changed, or been deleted, while another server led.
	OnStart func()
}

// ErrInvalidController is wrapped by the errors Manager.Register returns.
var ErrInvalidController = errors.New("invalid controller")

// watches returns every watch of c, the managed type first, with defaults
// applied.
func (c *Controller) watches() []Watch {
	var out []Watch
	if c.ManagedType != nil {
		managed := Watch{Type: c.ManagedType, Map: MapSelf}
		for _, w := range c.Watches {
			if ids.SameType(w.Type, c.ManagedType) {
				managed.Map = w.Map
			}
		}
		out = append(out, managed)
	}
	for _, w := range c.Watches {
		if c.ManagedType == nil || !ids.SameType(w.Type, c.ManagedType) {
			out = append(out, w)
		}
	}
	return out
}

// validate checks a declaration and fills its defaults.
func (c *Controller) validate() error {
	bad := func(field, reason string) error {
		name := c.Name
		if name == "" {
			name = "(unnamed)"
		}
		return fmt.Errorf("%w %s: %s: %s", ErrInvalidController, name, field, reason)
	}
	if c.Name == "" {
		return bad("Name", "required")
	}
	if c.Reconciler == nil {
		return bad("Reconciler", "required")
	}
	if c.ManagedType == nil && len(c.Watches) == 0 {
		return bad("ManagedType", "required when there are no Watches")
	}
	if c.ManagedType != nil && !fullType(c.ManagedType) {
		return bad("ManagedType", "needs group, group_version and kind")
	}
	if c.References != nil && c.ManagedType == nil {
		return bad("References", "needs a ManagedType")
	}
	seen := map[string]bool{}
	for i, w := range c.Watches {
		field := fmt.Sprintf("Watches[%d]", i)
		if !fullType(w.Type) {
			return bad(field+".Type", "needs group, group_version and kind")
		}
		if w.Map == nil {
			return bad(field+".Map", "required")
		}
		key := ids.TypeString(w.Type)
		if seen[key] {
			return bad(field+".Type", key+" is watched twice")
		}
		seen[key] = true
	}
	if err := validateCached(c.Cached, bad); err != nil {
		return err
	}
	if c.ResyncPeriod < 0 {
		return bad("ResyncPeriod", "negative")
	}
	if c.Workers < 0 {
		return bad("Workers", "negative")
	}
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	if c.Backoff.Base < 0 || c.Backoff.Max < 0 {
		return bad("Backoff", "negative")
	}
	if c.Backoff.Base == 0 {
		c.Backoff.Base = DefaultBackoffBase
	}
	if c.Backoff.Max == 0 {
		c.Backoff.Max = max(DefaultBackoffMax, c.Backoff.Base)
	}
	if c.Backoff.Max < c.Backoff.Base {
		return bad("Backoff.Max", "below Backoff.Base")
	}
	if c.Pacing.Factor < 0 || c.Pacing.Max < 0 || c.Pacing.Burst < 0 {
		return bad("Pacing", "negative")
	}
	if c.Pacing.Factor > 0 && c.Pacing.Max == 0 {
		return bad("Pacing.Max", "required with Pacing.Factor")
	}
	return nil
}

func fullType(t *pbresource.Type) bool {
	return t.GetGroup() != "" && t.GetGroupVersion() != "" && t.GetKind() != ""
}
