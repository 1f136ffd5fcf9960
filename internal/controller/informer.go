package controller

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage"
)

// watchBackoff bounds the delay between failed attempts to (re)open a watch.
var watchBackoff = Backoff{Base: 100 * time.Millisecond, Max: 30 * time.Second}

// informer follows one type through the resource service for the
// Manager's controllers and hands each change to its handlers, in the
// store's order. It remembers, for every resource of the type, only what it
// needs to tell a change from a repeat and to report a deletion: the id,
// the owner and the version (not the data: the owner reaper follows every
// type, and a full copy of the store would double the leader's memory).
//
// It follows the type with resource.Follow: when the watch ends (cut off
// for falling behind, the stream broken), it is resumed after the last
// index wholly seen, so that no change is lost. When the service can no
// longer resume from there, it lists again and the informer compares the new list with what it remembers: what is new
// or changed is handed on as an upsert, what is gone as a delete, so even
// then a change is never lost, only collapsed to its latest state. Such a
// delete carries only the id, the owner and the version.
type informer struct {
	client  resource.API
	typ     *pbresource.Type
	logger  *slog.Logger
	metrics *metrics
	// handlers are set before run and called on run's goroutine.
	handlers []func(Event)
	// cache, when the type is cached, gets every event before the
	// handlers, and is marked synced once the first list is in.
	cache *typeCache

	mu   sync.Mutex
	seen seenSet
}

// slot is where a resource of the informer's type is stored.
type slot struct{ namespace, name string }

func slotOf(id *pbresource.ID) slot {
	return slot{namespace: id.GetTenancy().GetNamespace(), name: id.GetName()}
}

// seenResource is what the informer remembers of a resource: as little
// as rebuilds its id, since it is kept for every resource of the type (an
// id of its own per resource, with its own type and tenancy, was about a
// quarter of a server's live heap at 100,000 resources).
type seenResource struct {
	uid     string
	owner   *pbresource.ID // nil for most resources
	version string
}

// seenSet is what an informer remembers, by namespace and then name. A map
// per namespace keyed by the name alone costs a sixth less per resource
// than one map keyed by both (about 100 bytes instead of 120).
type seenSet map[string]map[string]seenResource

func (s seenSet) get(k slot) (seenResource, bool) {
	r, ok := s[k.namespace][k.name]
	return r, ok
}

func (s seenSet) set(k slot, r seenResource) {
	names := s[k.namespace]
	if names == nil {
		names = make(map[string]seenResource)
		s[k.namespace] = names
	}
	names[k.name] = r
}

func (s seenSet) delete(k slot) {
	names := s[k.namespace]
	delete(names, k.name)
	if len(names) == 0 {
		delete(s, k.namespace)
	}
}

func remember(res *pbresource.Resource) seenResource {
	return seenResource{uid: res.GetId().GetUid(), owner: res.GetOwner(), version: res.GetVersion()}
}

// resource rebuilds what is remembered of the resource in slot k, of type
// typ, as a resource without data.
func (s seenResource) resource(typ *pbresource.Type, k slot) *pbresource.Resource {
	return &pbresource.Resource{
		Id:      &pbresource.ID{Type: typ, Tenancy: &pbresource.Tenancy{Namespace: k.namespace}, Name: k.name, Uid: s.uid},
		Owner:   s.owner,
		Version: s.version,
	}
}

func newInformer(client resource.API, typ *pbresource.Type, logger *slog.Logger, m *metrics) *informer {
	return &informer{
		client:  client,
		typ:     typ,
		logger:  logger,
		metrics: m,
		seen:    make(seenSet),
	}
}

// run follows the type until ctx ends. The watch is in-process code of the
// domains whose controllers read the type, so it may follow a sealed type
// (resource.Registration.Sealed): what it caches never leaves the process.
func (in *informer) run(ctx context.Context) {
	typ := ids.TypeString(in.typ)
	resource.Follow(ctx, resource.FollowConfig{
		Source: in.client,
		Type:   in.typ,
		// A controller's informer must not be cut off by a burst of batch
		// writes: it would list its type again, in the middle of the burst.
		Context: func(ctx context.Context) context.Context {
			return storage.WithWatchBuffer(resource.FromOperations(ctx), storage.ServerWatchBuffer)
		},
		Retry:     watchBackoff,
		Rand:      rand.Float64,
		Restarted: func(how string) { in.metrics.watchRestarts.WithLabelValues(typ, how).Inc() },
		Logger:    in.logger.With("component", "controller-informer"),
	}, in)
}

// Listed implements resource.Follower: a whole listing is compared with
// what the informer remembers, and the cache, when the type is cached,
// is marked synced.
func (in *informer) Listed(list []*pbresource.Resource, _ uint64) {
	fresh := make(map[slot]*pbresource.Resource, len(list))
	for _, res := range list {
		fresh[slotOf(res.GetId())] = res
	}
	in.replace(fresh)
	if in.cache != nil {
		in.cache.markSynced()
	}
}

// Upserted implements resource.Follower.
func (in *informer) Upserted(res *pbresource.Resource, _ uint64) { in.upsert(res) }

// Deleted implements resource.Follower.
func (in *informer) Deleted(res *pbresource.Resource, _ uint64) { in.remove(res) }

// Progressed implements resource.Follower; the informer needs no more
// than its events.
func (in *informer) Progressed(uint64) {}

// upsert remembers res and hands it on, unless it is a repeat (a resumed
// watch may repeat the events of its last index).
func (in *informer) upsert(res *pbresource.Resource) {
	k := slotOf(res.GetId())
	in.mu.Lock()
	old, had := in.seen.get(k)
	if had && old.version == res.GetVersion() && old.uid == res.GetId().GetUid() {
		in.mu.Unlock()
		return
	}
	in.seen.set(k, remember(res))
	in.mu.Unlock()
	if had && old.uid != res.GetId().GetUid() {
		// A new incarnation: the old one was deleted in between.
		in.dispatch(Event{Resource: old.resource(in.typ, k), Deleted: true})
	}
	in.dispatch(Event{Resource: res})
}

// remove forgets res and hands its deletion on, unless it was already gone.
func (in *informer) remove(res *pbresource.Resource) {
	k := slotOf(res.GetId())
	in.mu.Lock()
	old, had := in.seen.get(k)
	if !had || old.uid != res.GetId().GetUid() {
		in.mu.Unlock()
		return
	}
	in.seen.delete(k)
	in.mu.Unlock()
	in.dispatch(Event{Resource: res, Deleted: true})
}

// replace makes a fresh list what is remembered, handing on what differs.
func (in *informer) replace(fresh map[slot]*pbresource.Resource) {
	in.mu.Lock()
	var gone []*pbresource.Resource
	for ns, names := range in.seen {
		for name, old := range names {
			k := slot{ns, name}
			if _, ok := fresh[k]; !ok {
				gone = append(gone, old.resource(in.typ, k))
			}
		}
	}
	in.mu.Unlock()
	sortResources(gone)
	for _, old := range gone {
		in.remove(old)
	}
	list := make([]*pbresource.Resource, 0, len(fresh))
	for _, res := range fresh {
		list = append(list, res)
	}
	sortResources(list)
	for _, res := range list {
		in.upsert(res)
	}
}

func (in *informer) dispatch(ev Event) {
	if in.cache != nil {
		in.cache.events[fromWatch][b2i(in.cache.apply(ev, fromWatch))].Add(1)
	}
	for _, h := range in.handlers {
		h(ev)
	}
}

// nameKey keys a resource by type, namespace and name.
func nameKey(id *pbresource.ID) key {
	k := keyOf(id)
	k.uid = ""
	return k
}

func sortResources(list []*pbresource.Resource) {
	sort.Slice(list, func(i, j int) bool {
		a, b := list[i].GetId(), list[j].GetId()
		if na, nb := a.GetTenancy().GetNamespace(), b.GetTenancy().GetNamespace(); na != nb {
			return na < nb
		}
		return a.GetName() < b.GetName()
	})
}
