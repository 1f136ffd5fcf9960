package informer

import (
	"context"
	"sync"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage"
)

// typeState is what an informer keeps of one type beside the cache: its
// subscribers and how far its watch has got.
type typeState struct {
	in  *Informer
	typ *pbresource.Type

	// mu serialises the cache's changes of the type with its subscribers:
	// held while a change is applied and handed on, and while a
	// subscriber joins.
	mu   sync.Mutex
	subs map[*Subscription]struct{}
	// complete mirrors progress's, for a joining subscriber's deltas.
	complete uint64
	// deltas counts the deltas handed on, by op (Collector).
	deltas deltaCounts

	// pmu guards the progress, which readers ask while a subscriber runs.
	pmu        sync.Mutex
	prog       progress
	progressed chan struct{} // closed and replaced whenever prog moves
}

// progress is how far a type's watch has got.
type progress struct {
	// complete: every change up to it has been applied to the cache.
	complete uint64
	// synced: a whole listing has been applied.
	synced bool
	// lastChange is the index of the last change the cache took.
	lastChange uint64
}

func newTypeState(in *Informer, typ *pbresource.Type) *typeState {
	return &typeState{
		in: in, typ: typ,
		subs:       make(map[*Subscription]struct{}),
		progressed: make(chan struct{}),
	}
}

func (ts *typeState) progress() (complete uint64, synced bool, lastChange uint64) {
	ts.pmu.Lock()
	defer ts.pmu.Unlock()
	return ts.prog.complete, ts.prog.synced, ts.prog.lastChange
}

// watchProgress returns the progress and a channel closed when it moves.
func (ts *typeState) watchProgress() (progress, <-chan struct{}) {
	ts.pmu.Lock()
	defer ts.pmu.Unlock()
	return ts.prog, ts.progressed
}

// advance records the watch's progress: complete, and synced once a
// whole listing is in; changed is the index of a change the cache took (0:
// none).
func (ts *typeState) advance(complete uint64, synced bool, changed uint64) {
	ts.pmu.Lock()
	defer ts.pmu.Unlock()
	p := ts.prog
	p.complete = max(p.complete, complete)
	p.synced = p.synced || synced
	p.lastChange = max(p.lastChange, changed)
	if p != ts.prog {
		ts.prog = p
		close(ts.progressed)
		ts.progressed = make(chan struct{})
	}
}

// run follows the type until ctx ends.
func (ts *typeState) run(ctx context.Context) {
	cfg := ts.in.cfg
	fc := resource.FollowConfig{
		Source: cfg.Source,
		Type:   ts.typ,
		Retry:  cfg.Retry,
		Rand:   cfg.Rand,
		Logger: ts.in.log,
	}
	if cfg.Local {
		// The store's progress marks carry the index forward while the
		// type does not change; a burst of writes must not cut the watch
		// off.
		fc.Context = func(ctx context.Context) context.Context {
			return storage.WithProgressMarks(storage.WithWatchBuffer(ctx, storage.ServerWatchBuffer))
		}
	}
	resource.Follow(ctx, fc, ts)
}

// Listed implements resource.Follower: a whole listing replaces what the
// cache holds.
func (ts *typeState) Listed(list []*pbresource.Resource, idx uint64) {
	ts.advance(idx, true, ts.replace(list, idx))
}

// Upserted implements resource.Follower.
func (ts *typeState) Upserted(res *pbresource.Resource, idx uint64) {
	ts.advance(0, false, ts.upsert(res, idx))
}

// Deleted implements resource.Follower.
func (ts *typeState) Deleted(res *pbresource.Resource, idx uint64) {
	ts.advance(0, false, ts.remove(res, idx))
}

// Progressed implements resource.Follower.
func (ts *typeState) Progressed(complete uint64) { ts.advance(complete, false, 0) }

// nameOnly is id without its uid: whatever incarnation is cached.
func nameOnly(id *pbresource.ID) *pbresource.ID {
	return &pbresource.ID{Type: id.GetType(), Tenancy: id.GetTenancy(), Name: id.GetName()}
}

// upsert applies an upsert seen at idx and hands on what it changed; it
// returns idx when the cache changed, 0 for a repeat or an older version.
func (ts *typeState) upsert(res *pbresource.Resource, idx uint64) uint64 {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.upsertLocked(res, idx)
}

func (ts *typeState) upsertLocked(res *pbresource.Resource, idx uint64) uint64 {
	cache := ts.in.cache
	key := nameOnly(res.GetId())
	old := cache.Get(key)
	cache.Apply(controller.Event{Resource: res})
	now := cache.Get(key)
	switch {
	case now == old:
		return 0
	case old == nil:
		ts.dispatchLocked(Delta{Op: Added, New: now, Index: idx})
	case old.Resource.GetId().GetUid() != now.Resource.GetId().GetUid():
		// A new incarnation: the old one was deleted in between.
		ts.dispatchLocked(Delta{Op: Removed, Old: old, Index: idx})
		ts.dispatchLocked(Delta{Op: Added, New: now, Index: idx})
	default:
		ts.dispatchLocked(Delta{Op: Changed, Old: old, New: now, Index: idx})
	}
	return idx
}

// remove applies a deletion seen at idx and hands it on when the cache
// held that incarnation; it returns idx then, 0 otherwise.
func (ts *typeState) remove(res *pbresource.Resource, idx uint64) uint64 {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.removeLocked(res, idx)
}

func (ts *typeState) removeLocked(res *pbresource.Resource, idx uint64) uint64 {
	cache := ts.in.cache
	key := nameOnly(res.GetId())
	old := cache.Get(key)
	if old == nil {
		return 0
	}
	cache.Apply(controller.Event{Resource: res, Deleted: true})
	if cache.Get(key) == old {
		return 0 // another incarnation's deletion
	}
	ts.dispatchLocked(Delta{Op: Removed, Old: old, Index: idx})
	return idx
}

// replace makes a whole listing at idx what the cache holds, handing on
// what differs: what it lacks is removed, what is new or newer added or
// changed. It returns idx when the cache changed (or the type had never
// been listed: the listing is its first state), 0 otherwise.
func (ts *typeState) replace(fresh []*pbresource.Resource, idx uint64) uint64 {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	listed := make(map[[2]string]bool, len(fresh))
	for _, res := range fresh {
		listed[nsName(res.GetId())] = true
	}
	var changed uint64
	if _, synced, _ := ts.progress(); !synced {
		changed = idx
	}
	for _, o := range ts.in.cache.List(ts.typ) {
		if !listed[nsName(o.Resource.GetId())] {
			changed = max(changed, ts.removeLocked(o.Resource, idx))
		}
	}
	for _, res := range fresh {
		changed = max(changed, ts.upsertLocked(res, idx))
	}
	ts.in.cache.MarkSynced(ts.typ)
	ts.complete = idx
	return changed
}

func nsName(id *pbresource.ID) [2]string {
	return [2]string{id.GetTenancy().GetNamespace(), id.GetName()}
}

func (ts *typeState) dispatchLocked(d Delta) {
	ts.complete = max(ts.complete, d.Index)
	ts.deltas[d.Op].Add(1)
	for s := range ts.subs {
		s.fn(d)
	}
}
