package informer

import (
	"sync"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/controller"
)

// Op is what a delta did to a resource.
type Op int

const (
	// Added: a resource the cache did not hold (a new name, or a new
	// incarnation after the old one's Removed).
	Added Op = iota + 1
	// Changed: a newer version of a resource the cache held.
	Changed
	// Removed: a resource the cache held is gone.
	Removed
)

func (o Op) String() string {
	switch o {
	case Added:
		return "added"
	case Changed:
		return "changed"
	case Removed:
		return "removed"
	}
	return "unknown"
}

// Delta is one change of the cache. Old is nil for Added, New for
// Removed. Both are shared with every reader: never modify them.
type Delta struct {
	Op       Op
	Old, New *controller.Object
	// Index is the store index the change was seen at; a subscriber's
	// first deltas (what the cache held when it subscribed) carry the
	// type's index then.
	Index uint64
}

// Resource is the resource the delta is about: New's, or Old's for a
// removal.
func (d Delta) Resource() *pbresource.Resource {
	if d.New != nil {
		return d.New.Resource
	}
	return d.Old.Resource
}

// Subscription is one consumer's registration for a type's deltas.
type Subscription struct {
	ts   *typeState
	fn   func(Delta)
	once sync.Once
}

// Subscribe calls fn with every delta of typ, in the store's order, on
// the type's watch goroutine, starting with what the cache holds now (as
// Added, in namespace and name order): the consumer neither misses a
// change nor sees one twice. fn must be quick and must not call Subscribe
// or Cancel itself; it may read the informer (Get, List, ByIndex), but
// not wait on it (WaitIndex and the like), since the type does not move
// on until fn returns. It fails with ErrNotDeclared when typ is not
// declared.
func (in *Informer) Subscribe(typ *pbresource.Type, fn func(Delta)) (*Subscription, error) {
	ts, err := in.state(typ)
	if err != nil {
		return nil, err
	}
	s := &Subscription{ts: ts, fn: fn}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for _, o := range in.cache.List(typ) {
		fn(Delta{Op: Added, New: o, Index: ts.complete})
	}
	ts.subs[s] = struct{}{}
	return s, nil
}

// Cancel ends the subscription: fn is not called once Cancel returns.
func (s *Subscription) Cancel() {
	s.once.Do(func() {
		s.ts.mu.Lock()
		delete(s.ts.subs, s)
		s.ts.mu.Unlock()
	})
}
