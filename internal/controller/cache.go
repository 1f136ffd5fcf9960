package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/proto"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
)

// Cache holds, for the types the controllers of a Manager declare in
// Controller.Cached, every resource the Manager's watches have seen, with
// its data decoded once, and named indexes over them. Controllers read it
// instead of listing and decoding from the store: a mapper looks up what
// an event concerns (the tasks on an instance) and stays a pure function
// of the event and the cache; a reconciler reads what it decides on.
//
// What a reader may assume:
//
//   - Every event of a cached type is applied to the cache before any
//     mapper sees it. So when a mapper runs, the cache already holds the
//     event it is given; and when Reconcile runs for a request, the cache
//     holds every event that caused the request to be queued, and maybe
//     later ones. It is never older than the cause, but it is no snapshot:
//     it may move during a Reconcile, and two types move independently.
//   - A controller's workers start, each term, only once every type it
//     caches has been listed whole into the cache (synced). Before that
//     the cache holds part of the list; while this server does not lead it
//     is empty (the Manager empties it when a term ends, to free it).
//   - It lags the store: a reconciler's own write is not in it until the
//     watch brings it back, unless the reconciler writes through
//     SeeingWrites, and a request mapped by a resync (a list from the
//     store) may name a change the cache has not seen yet. Writes must
//     therefore stay compare-and-swap on the version read: a stale read
//     fails its write, and the retry reads again.
//
// Objects are shared, not copied: every reader gets the same *Object, its
// Resource and its Data, and the same slices from List and ByIndex. They
// must never be modified; clone an object (proto.Clone) before editing it
// to write it back, and copy a slice before sorting or editing it. A
// cache made with CheckReadOnly catches a reader that edits an object
// (tests turn it on).
//
// Only declared types are cached: the owner reaper follows every type,
// and a decoded copy of the whole store would double the leader's memory.
type Cache struct {
	checkReadOnly bool

	// mu guards types and fed. Declarations happen before the cache is
	// fed; after that types is only read.
	mu    sync.RWMutex
	types map[typeKey]*typeCache
	fed   bool

	// revisions numbers the changes of every type (Revision), never
	// twice, across terms.
	revisions atomic.Uint64
}

// Object is a resource as the Cache holds it: as stored, and its data
// decoded. Shared by every reader: never modify it, nor its Resource, nor
// its Data.
type Object struct {
	Resource *pbresource.Resource
	// Data is Resource.Data decoded; nil when it does not decode, and then
	// DecodeErr says why.
	Data      proto.Message
	DecodeErr error

	// keys[i] are the keys the object is filed under in its type's
	// indexes[i], worked out once, when the cache applied it; derived[i]
	// is the value of its type's derived[i]. Both are nil for an object
	// the cache did not make.
	keys    [][]string
	derived []any
	// of is the type's cache, to find a Derived's position.
	of *typeCache
}

// Decoded returns the object's data as a T; false when it is absent or of
// another type. The message is shared: never modify it.
func Decoded[T proto.Message](o *Object) (T, bool) {
	t, ok := o.Data.(T)
	return t, ok
}

// Index names a way to look resources of a type up: Keys returns the keys
// a resource is filed under (none: it is not in the index). Keys must be
// a pure function of the object: the cache calls it once per object, as
// it applies it, and takes the object out of the index by the keys it
// gave then.
//
// An index is declared by its pointer: two controllers that declare the
// same *Index share it; two different Indexes of one name on one type are
// refused. A domain declares the indexes its controllers share as package
// variables (orchestrator.LiveTasksByInstance).
type Index struct {
	Name string
	Keys func(*Object) []string
}

// Derived names a value the cache works out from each object of a type
// as it applies it, and keeps with the object for every reader: what a
// controller would otherwise turn each object into on every run, or keep
// beside the cache in step with its events by hand (the scheduler's view
// of a task, which decodes its status). Make must be a pure function of
// the object; its value is shared like the object and must never be
// modified. Like an Index it is declared by its pointer, and two
// controllers that declare the same *Derived share it.
type Derived struct {
	Name string
	Make func(*Object) any
}

// DerivedOf returns d's value for o, as the cache made it when it applied
// o; false when d is not declared on o's type, o was not made by the
// cache, or Make gave a value that is not a T (nil included).
func DerivedOf[T any](o *Object, d *Derived) (T, bool) {
	var zero T
	if o == nil || o.of == nil {
		return zero, false
	}
	for i, x := range o.of.derived {
		if x == d {
			v, ok := o.derived[i].(T)
			return v, ok
		}
	}
	return zero, false
}

// CachedType declares a type a controller reads from the Cache, with the
// indexes it looks it up by (the built-in IndexOwner needs no declaring)
// and the values it derives from each object.
type CachedType struct {
	Type    *pbresource.Type
	Indexes []*Index
	Derived []*Derived
}

// IndexOwner is the built-in index of every cached type: a resource is
// filed under OwnerKey of its owner (not at all when it has none).
const IndexOwner = "owner"

// OwnerKey is the key of an owner in IndexOwner: its type, namespace and
// name (not its uid: the owned resources of any incarnation).
func OwnerKey(id *pbresource.ID) string {
	return ids.TypeString(id.GetType()) + "/" + id.GetTenancy().GetNamespace() + "/" + id.GetName()
}

var ownerIndex = &Index{Name: IndexOwner, Keys: func(o *Object) []string {
	if owner := o.Resource.GetOwner(); owner != nil {
		return []string{OwnerKey(owner)}
	}
	return nil
}}

// CacheOption configures a Cache.
type CacheOption func(*Cache)

// CheckReadOnly makes the cache keep a private copy of every object and
// panic, naming it, when an object it replaces or removes (or that Verify
// looks at) no longer equals its copy: a reader modified a shared object.
// It doubles the cache's memory and costs a comparison per change; for
// tests.
func CheckReadOnly() CacheOption { return func(c *Cache) { c.checkReadOnly = true } }

// NewCache returns an empty cache. A Manager makes its own when its Config
// has none; give it one to hand the same cache to the controllers'
// constructors.
func NewCache(opts ...CacheOption) *Cache {
	c := &Cache{types: make(map[typeKey]*typeCache)}
	for _, o := range opts {
		o(c)
	}
	return c
}

// typeKey identifies a type without building a string.
type typeKey struct{ group, version, kind string }

func typeKeyOf(t *pbresource.Type) typeKey {
	return typeKey{t.GetGroup(), t.GetGroupVersion(), t.GetKind()}
}

// typeCache is the cache of one type.
type typeCache struct {
	typ           *pbresource.Type
	indexes       []*Index // ownerIndex first
	derived       []*Derived
	checkReadOnly bool
	// revisions is the cache's counter; revision (under mu) is the
	// number of the type's last change.
	revisions *atomic.Uint64
	revision  uint64

	mu sync.RWMutex
	// all holds every object of the type.
	all *objectSet
	// byIndex[i] files the objects under indexes[i]'s keys.
	byIndex []map[string]*objectSet
	// frozen holds the private copies of CheckReadOnly.
	frozen map[slot]*Object
	// deleted holds, by slot, the uid of an incarnation a controller
	// deleted through SeeingWrites, until the watch brings that deletion:
	// an upsert of it the watch brings meanwhile is older than the
	// deletion and is ignored (a uid is never written again once deleted).
	deleted map[slot]string
	// synced is closed once a term's watch has listed the type whole.
	synced     chan struct{}
	syncedOnce *sync.Once

	// events counts what the cache did with each event, by where it came
	// from and whether it changed the cache (trellis_controller_cache_events_total).
	events [numSources][2]atomic.Uint64
}

// source is where an event the cache applies comes from.
type source int

const (
	fromWatch source = iota // the Manager's watches
	fromWrite               // a controller's write, through SeeingWrites
	fromApply               // Cache.Apply, by hand
	numSources
)

func (s source) String() string {
	switch s {
	case fromWatch:
		return "watch"
	case fromWrite:
		return "write"
	default:
		return "apply"
	}
}

// validateCached checks a controller's Cached declarations; bad names the
// field.
func validateCached(cached []CachedType, bad func(field, reason string) error) error {
	seen := map[typeKey]bool{}
	for i, ct := range cached {
		field := fmt.Sprintf("Cached[%d]", i)
		if !fullType(ct.Type) {
			return bad(field+".Type", "needs group, group_version and kind")
		}
		if seen[typeKeyOf(ct.Type)] {
			return bad(field+".Type", ids.TypeString(ct.Type)+" is cached twice")
		}
		seen[typeKeyOf(ct.Type)] = true
		names := map[string]bool{}
		for j, x := range ct.Indexes {
			f := fmt.Sprintf("%s.Indexes[%d]", field, j)
			switch {
			case x == nil:
				return bad(f, "nil")
			case x.Name == "":
				return bad(f+".Name", "required")
			case x.Name == IndexOwner:
				return bad(f+".Name", "owner is built in")
			case x.Keys == nil:
				return bad(f+".Keys", "required")
			case names[x.Name]:
				return bad(f+".Name", x.Name+" is declared twice")
			}
			names[x.Name] = true
		}
		derived := map[string]bool{}
		for j, x := range ct.Derived {
			f := fmt.Sprintf("%s.Derived[%d]", field, j)
			switch {
			case x == nil:
				return bad(f, "nil")
			case x.Name == "":
				return bad(f+".Name", "required")
			case x.Make == nil:
				return bad(f+".Make", "required")
			case derived[x.Name]:
				return bad(f+".Name", x.Name+" is declared twice")
			}
			derived[x.Name] = true
		}
	}
	return nil
}

// ErrCacheInUse is returned by Declare once the cache has been fed.
var ErrCacheInUse = errors.New("controller cache: types are declared before the cache is fed")

// Declare adds cached types and their indexes, all or none. Manager.Register
// declares each controller's Cached; a test harness that drives mappers by
// hand declares them itself. An index of the same name as one already
// declared on the type must be the same *Index. Declaring is refused once
// the cache has been fed (ErrCacheInUse).
func (c *Cache) Declare(cached ...CachedType) error {
	if err := validateCached(cached, func(field, reason string) error {
		return fmt.Errorf("%s: %s", field, reason)
	}); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fed {
		return ErrCacheInUse
	}
	for _, ct := range cached {
		tc := c.types[typeKeyOf(ct.Type)]
		if tc == nil {
			continue
		}
		for _, x := range ct.Indexes {
			for _, have := range tc.indexes {
				if have.Name == x.Name && have != x {
					return fmt.Errorf("index %s of %s is already declared as another Index", x.Name, ids.TypeString(ct.Type))
				}
			}
		}
		for _, x := range ct.Derived {
			for _, have := range tc.derived {
				if have.Name == x.Name && have != x {
					return fmt.Errorf("derived value %s of %s is already declared as another Derived", x.Name, ids.TypeString(ct.Type))
				}
			}
		}
	}
	for _, ct := range cached {
		k := typeKeyOf(ct.Type)
		tc := c.types[k]
		if tc == nil {
			tc = &typeCache{typ: ct.Type, indexes: []*Index{ownerIndex}, checkReadOnly: c.checkReadOnly, revisions: &c.revisions}
			c.types[k] = tc
		}
		for _, x := range ct.Indexes {
			if !slices.Contains(tc.indexes, x) {
				tc.indexes = append(tc.indexes, x)
			}
		}
		for _, x := range ct.Derived {
			if !slices.Contains(tc.derived, x) {
				tc.derived = append(tc.derived, x)
			}
		}
		tc.resetLocked()
	}
	return nil
}

// typeOf returns the cache of a type, nil when it is not cached.
func (c *Cache) typeOf(t *pbresource.Type) *typeCache {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.types[typeKeyOf(t)]
}

// mustType returns the cache of a type, panicking when no controller
// declared it: reading an undeclared type is a programming error that
// every test of the reader finds. In a running server the panic costs one
// event (in a mapper) or one retried reconcile, never the process: the
// runner recovers both.
func (c *Cache) mustType(t *pbresource.Type) *typeCache {
	tc := c.typeOf(t)
	if tc == nil {
		panic("controller cache: type " + ids.TypeString(t) + " is not cached: declare it in Controller.Cached")
	}
	return tc
}

func (c *Cache) markFed() {
	c.mu.RLock()
	fed := c.fed
	c.mu.RUnlock()
	if !fed {
		c.mu.Lock()
		c.fed = true
		c.mu.Unlock()
	}
}

// cachedTypes returns every declared type.
func (c *Cache) cachedTypes() []*typeCache {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]*typeCache, 0, len(c.types))
	for _, tc := range c.types {
		out = append(out, tc)
	}
	return out
}

// Get returns the cached resource of id's type, namespace and name (and
// uid, when id has one); nil when there is none. It panics when the type
// is not cached.
func (c *Cache) Get(id *pbresource.ID) *Object {
	tc := c.mustType(id.GetType())
	tc.mu.RLock()
	defer tc.mu.RUnlock()
	o := tc.all.members[slotOf(id)]
	if o == nil || (id.GetUid() != "" && o.Resource.GetId().GetUid() != id.GetUid()) {
		return nil
	}
	return o
}

// List returns every cached resource of a type, ordered by namespace and
// name. The slice is shared like the objects: never modify it (appending
// to it copies it). It is kept between calls until the type changes, and
// made again in one pass, without sorting, after changes in place. It
// panics when the type is not cached.
func (c *Cache) List(typ *pbresource.Type) []*Object {
	tc := c.mustType(typ)
	return tc.read(func() *objectSet { return tc.all })
}

// ByIndex returns the cached resources of a type filed under key in the
// named index, ordered by namespace and name. The slice is shared and
// kept like List's; a lookup costs nothing while the key's resources are
// unchanged, and their number, not the type's, after a change. It panics
// when the type is not cached or the index not declared on it.
func (c *Cache) ByIndex(typ *pbresource.Type, index, key string) []*Object {
	tc := c.mustType(typ)
	i := tc.indexOf(index)
	if i < 0 {
		panic("controller cache: index " + index + " is not declared on " + ids.TypeString(typ))
	}
	return tc.read(func() *objectSet { return tc.byIndex[i][key] })
}

// read returns the sorted members of the set that set finds, building
// them under the write lock when a change undid them.
func (tc *typeCache) read(set func() *objectSet) []*Object {
	tc.mu.RLock()
	s := set()
	if s == nil {
		tc.mu.RUnlock()
		return nil
	}
	if out, ok := s.current(); ok {
		tc.mu.RUnlock()
		return out
	}
	tc.mu.RUnlock()
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if s = set(); s == nil {
		return nil
	}
	return s.build()
}

// Revision returns the number of typ's last change in the cache: it
// moves whenever an object of the type is added, replaced or removed, and
// when the cache is emptied at a term's start or end, and never takes a
// value twice. A reader that works something out from a whole type (the
// scheduler's instances matching a group) keeps it until the revision
// moves, instead of being told of changes by its mappers. It panics when
// the type is not cached.
func (c *Cache) Revision(typ *pbresource.Type) uint64 {
	tc := c.mustType(typ)
	tc.mu.RLock()
	defer tc.mu.RUnlock()
	return tc.revision
}

// Indexed reports whether typ is cached with the named index declared on
// it: for a reader that is not a controller (an operation served by every
// server), which asks before it looks up, rather than panicking.
func (c *Cache) Indexed(typ *pbresource.Type, index string) bool {
	tc := c.typeOf(typ)
	return tc != nil && tc.indexOf(index) >= 0
}

// Synced reports whether the current term's watch of typ has listed it
// whole into the cache (false when it is not cached).
func (c *Cache) Synced(typ *pbresource.Type) bool {
	tc := c.typeOf(typ)
	if tc == nil {
		return false
	}
	select {
	case <-tc.syncedCh():
		return true
	default:
		return false
	}
}

// MarkSynced says that typ has been listed whole into the cache, as a
// term's watch says once its list is applied, for a test harness that
// lists the store into the cache by hand (the Manager's watches mark
// their own). It panics when the type is not cached.
func (c *Cache) MarkSynced(typ *pbresource.Type) {
	c.markFed()
	c.mustType(typ).markSynced()
}

// Apply records an event of a cached type (others are ignored): an upsert
// replaces what is cached under its name, a delete removes it when it is
// the same incarnation. An upsert of the same incarnation at an older
// version than the cached one is ignored, so that the cache never goes
// back, and so is one at the same version: it is a repeat (the store
// gives every write a new version), such as the watch bringing back a
// write the cache already has from SeeingWrites, and it is neither
// decoded, filed nor derived again, nor moves the revision. The Manager's
// watches call it for every event before mapping it; a test harness that
// drives a controller's mappers by hand calls it the same way. A
// controller's own writes reach it through SeeingWrites.
func (c *Cache) Apply(ev Event) { c.applyFrom(ev, fromApply) }

func (c *Cache) applyFrom(ev Event, from source) {
	id := ev.Resource.GetId()
	if id == nil {
		return
	}
	tc := c.typeOf(id.GetType())
	if tc == nil {
		return
	}
	c.markFed()
	tc.events[from][b2i(tc.apply(ev, from))].Add(1)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Verify checks, under CheckReadOnly, that no cached object has been
// modified, and returns an error naming the first that has (nil without
// CheckReadOnly).
func (c *Cache) Verify() error {
	if !c.checkReadOnly {
		return nil
	}
	for _, tc := range c.cachedTypes() {
		tc.mu.RLock()
		for k, o := range tc.all.members {
			if err := tc.checkFrozenLocked(k, o); err != nil {
				tc.mu.RUnlock()
				return err
			}
		}
		tc.mu.RUnlock()
	}
	return nil
}

// reset empties every type, when a term starts (its watches list afresh)
// and when it ends (a follower reads nothing from the cache).
func (c *Cache) reset() {
	c.markFed()
	for _, tc := range c.cachedTypes() {
		tc.mu.Lock()
		tc.resetLocked()
		tc.mu.Unlock()
	}
}

// waitSynced waits until every type of cached is synced, or ctx ends
// (false).
func (c *Cache) waitSynced(ctx context.Context, cached []CachedType) bool {
	for _, ct := range cached {
		select {
		case <-c.mustType(ct.Type).syncedCh():
		case <-ctx.Done():
			return false
		}
	}
	return true
}

func (tc *typeCache) resetLocked() {
	tc.revision = tc.revisions.Add(1)
	tc.all = newObjectSet()
	tc.byIndex = make([]map[string]*objectSet, len(tc.indexes))
	for i := range tc.byIndex {
		tc.byIndex[i] = make(map[string]*objectSet)
	}
	tc.frozen = nil
	tc.deleted = nil
	tc.synced = make(chan struct{})
	tc.syncedOnce = new(sync.Once)
}

func (tc *typeCache) syncedCh() <-chan struct{} {
	tc.mu.RLock()
	defer tc.mu.RUnlock()
	return tc.synced
}

// markSynced says the term's watch has listed the type whole.
func (tc *typeCache) markSynced() {
	tc.mu.RLock()
	ch, once := tc.synced, tc.syncedOnce
	tc.mu.RUnlock()
	once.Do(func() { close(ch) })
}

func (tc *typeCache) indexOf(name string) int {
	for i, x := range tc.indexes {
		if x.Name == name {
			return i
		}
	}
	return -1
}

// apply records ev, which came from from, and reports whether it changed
// the cache.
func (tc *typeCache) apply(ev Event, from source) bool {
	k := slotOf(ev.Resource.GetId())
	if !ev.Deleted && tc.hasCurrent(k, ev.Resource) {
		// Nothing new: not worth decoding and deriving to throw away.
		return false
	}
	var o *Object
	if !ev.Deleted {
		// Decoded, filed and derived outside the lock: readers are not
		// held up by it. (Indexes and derived values are declared before
		// the cache is fed, and never change after.)
		o = newObject(ev.Resource)
		o.of = tc
		o.keys = make([][]string, len(tc.indexes))
		for i, x := range tc.indexes {
			o.keys[i] = x.Keys(o)
		}
		if len(tc.derived) > 0 {
			o.derived = make([]any, len(tc.derived))
			for i, x := range tc.derived {
				o.derived[i] = x.Make(o)
			}
		}
	}
	tc.mu.Lock()
	defer tc.mu.Unlock()
	uid := ev.Resource.GetId().GetUid()
	if gone, ok := tc.deleted[k]; ok && gone == uid {
		if !ev.Deleted {
			return false
		}
		if from == fromWatch {
			delete(tc.deleted, k)
		}
	}
	if ev.Deleted && from == fromWrite && uid != "" {
		if tc.deleted == nil {
			tc.deleted = make(map[slot]string)
		}
		tc.deleted[k] = uid
	}
	old := tc.all.members[k]
	sameIncarnation := old != nil && old.Resource.GetId().GetUid() == uid
	if ev.Deleted {
		if !sameIncarnation {
			return false
		}
	} else if sameIncarnation && !newerVersion(ev.Resource.GetVersion(), old.Resource.GetVersion()) {
		return false
	}
	if old != nil && tc.checkReadOnly {
		if err := tc.checkFrozenLocked(k, old); err != nil {
			panic(err.Error())
		}
		delete(tc.frozen, k)
	}
	// A key that the old object and the new share keeps the resource in
	// place (its set's order stands); only the keys it leaves or joins
	// change membership.
	tc.revision = tc.revisions.Add(1)
	for i := range tc.indexes {
		var oldKeys, newKeys []string
		if old != nil {
			oldKeys = old.keys[i]
		}
		if o != nil {
			newKeys = o.keys[i]
		}
		for _, key := range oldKeys {
			if slices.Contains(newKeys, key) {
				continue
			}
			if set := tc.byIndex[i][key]; set != nil {
				set.remove(k)
				if len(set.members) == 0 {
					delete(tc.byIndex[i], key)
				}
			}
		}
		for _, key := range newKeys {
			set := tc.byIndex[i][key]
			if set == nil {
				set = newObjectSet()
				tc.byIndex[i][key] = set
			}
			set.put(k, o)
		}
	}
	if o == nil {
		tc.all.remove(k)
		return true
	}
	tc.all.put(k, o)
	if tc.checkReadOnly {
		if tc.frozen == nil {
			tc.frozen = make(map[slot]*Object)
		}
		f := &Object{Resource: proto.Clone(o.Resource).(*pbresource.Resource), DecodeErr: o.DecodeErr}
		if o.Data != nil {
			f.Data = proto.Clone(o.Data)
		}
		tc.frozen[k] = f
	}
	return true
}

// errModified is what CheckReadOnly reports.
var errModified = errors.New("controller cache: a cached object was modified by a reader (objects are shared: clone before editing)")

func (tc *typeCache) checkFrozenLocked(k slot, o *Object) error {
	f := tc.frozen[k]
	if f == nil {
		return nil
	}
	if !proto.Equal(f.Resource, o.Resource) || !proto.Equal(f.Data, o.Data) {
		return fmt.Errorf("%w: %s %s/%s", errModified, ids.TypeString(tc.typ), k.namespace, k.name)
	}
	return nil
}

// newObject decodes a resource's data.
func newObject(res *pbresource.Resource) *Object {
	o := &Object{Resource: res}
	if res.GetData() == nil {
		o.DecodeErr = errors.New("no data")
		return o
	}
	o.Data, o.DecodeErr = res.GetData().UnmarshalNew()
	return o
}

// hasCurrent reports whether the cache holds res's incarnation at res's
// version or a newer one, or has it deleted, under the read lock: an
// upsert of res would change nothing.
func (tc *typeCache) hasCurrent(k slot, res *pbresource.Resource) bool {
	tc.mu.RLock()
	defer tc.mu.RUnlock()
	if gone, ok := tc.deleted[k]; ok && gone == res.GetId().GetUid() {
		return true
	}
	old := tc.all.members[k]
	return old != nil && old.Resource.GetId().GetUid() == res.GetId().GetUid() &&
		!newerVersion(res.GetVersion(), old.Resource.GetVersion())
}

// newerVersion reports whether version a is newer than b. Versions are
// the store's decimal indexes, a new one for every write; a version that
// is not one is taken as newer, so that what cannot be compared is
// applied.
func newerVersion(a, b string) bool {
	va, err1 := strconv.ParseUint(a, 10, 64)
	vb, err2 := strconv.ParseUint(b, 10, 64)
	return err1 != nil || err2 != nil || va > vb
}

// Cache implements Lookup: the Manager's cache, for the controller's
// mappers.
func (r *runner) Cache() *Cache { return r.cache }

// CacheLookup is a Lookup over a cache alone (no References), for a test
// harness that drives a controller's mappers by hand.
func CacheLookup(c *Cache) Lookup { return cacheLookup{c} }

type cacheLookup struct{ c *Cache }

func (l cacheLookup) Referencing(*pbresource.ID) []*pbresource.ID { return nil }
func (l cacheLookup) Cache() *Cache                               { return l.c }
