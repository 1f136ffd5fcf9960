package fanout

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/backoff"
	"trellis.dev/trellis/internal/storage"
)

// Defaults of a Fanout.
const (
	// DefaultBuffer is how many events a subscriber may have unsent
	// before it is ended (and starts over with a snapshot).
	DefaultBuffer = 1024
	// DefaultMinIndexWait bounds how long a subscriber waits for the
	// Fanout's view to reach the index it has seen before it is sent
	// elsewhere.
	DefaultMinIndexWait = 5 * time.Second
	// retryWait is the pause before the watch is opened again.
	retryWait = 500 * time.Millisecond
)

// Errors that end a subscription; both are OutOfRange: open it again.
var (
	ErrFellBehind = status.Error(codes.OutOfRange, "the stream fell behind: open it again")
	ErrRestarting = status.Error(codes.OutOfRange, "the server lists again from the start: open the stream again")
	errStopped    = status.Error(codes.Unavailable, "the server is stopping")
)

// Watcher opens a WatchList stream; resource.API is one.
type Watcher interface {
	Watch(context.Context, *pbresource.WatchListRequest) (storage.Watch, error)
}

// ClusterIndex returns how far the cluster's committed log reaches (the
// leader's commit index): what an index a subscriber has seen must be at
// or below, unless the servers lost their state.
type ClusterIndex func(ctx context.Context) (uint64, error)

// Config configures a Fanout.
type Config[K comparable] struct {
	// Watcher and Request are the one watch the Fanout keeps.
	Watcher Watcher
	Request *pbresource.WatchListRequest
	// Key is the key a resource belongs to; false when it belongs to none
	// (its subscribers are never told of it). It is called outside the
	// Fanout's lock, so that decoding does not hold subscribers up.
	Key func(*pbresource.Resource) (K, bool)
	// Suppress, when set, is asked about every update of a resource that
	// stays under the same key; true keeps the update from the key's
	// subscribers (the index still takes it). Called under the lock.
	Suppress func(prev, next *pbresource.Resource) bool
	// Buffer: see DefaultBuffer. MinIndexWait: see DefaultMinIndexWait.
	Buffer       int
	MinIndexWait time.Duration
	// ClusterIndex, when set, tells a server that is merely behind from a
	// cluster that lost its state; without it, an index the view does not
	// reach in time is taken as this server's lag.
	ClusterIndex ClusterIndex
	Logger       *slog.Logger
}

// resKey names a resource of the watched type: namespace and name.
type resKey struct{ namespace, name string }

func keyOf(id *pbresource.ID) resKey {
	return resKey{id.GetTenancy().GetNamespace(), id.GetName()}
}

// Fanout indexes the watched resources by key and streams each key's to
// its subscribers.
type Fanout[K comparable] struct {
	cfg Config[K]
	log *slog.Logger

	mu sync.Mutex
	// ready: the watch has delivered its snapshot; readyCh is closed then
	// (and replaced when the Fanout starts over).
	ready   bool
	readyCh chan struct{}
	stopped bool
	// index is how current the view is: every change up to it has been
	// applied (events and the store's progress marks).
	index uint64
	byKey map[K]map[resKey]*pbresource.Resource
	where map[resKey]K
	subs  map[K]map[*Subscription[K]]struct{}
}

// New returns a Fanout of cfg; Start runs it.
func New[K comparable](cfg Config[K]) *Fanout[K] {
	if cfg.Buffer <= 0 {
		cfg.Buffer = DefaultBuffer
	}
	if cfg.MinIndexWait <= 0 {
		cfg.MinIndexWait = DefaultMinIndexWait
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Fanout[K]{
		cfg: cfg, log: log,
		readyCh: make(chan struct{}),
		byKey:   make(map[K]map[resKey]*pbresource.Resource),
		where:   make(map[resKey]K),
		subs:    make(map[K]map[*Subscription[K]]struct{}),
	}
}

// SetClusterIndex sets Config.ClusterIndex; call it before Start.
func (f *Fanout[K]) SetClusterIndex(ci ClusterIndex) { f.cfg.ClusterIndex = ci }

// Index is how current the Fanout's view is: every change up to it has
// been applied.
func (f *Fanout[K]) Index() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.index
}

// Start watches until ctx ends, starting over (a fresh listing, every
// subscriber ended with ErrRestarting) whenever the watch fails.
func (f *Fanout[K]) Start(ctx context.Context) error {
	defer f.stop()
	for {
		err := f.watch(ctx)
		if ctx.Err() != nil {
			return nil
		}
		f.log.Info("watch ended; listing again", "kind", f.cfg.Request.GetType().GetKind(), "err", err)
		f.reset()
		t := time.NewTimer(retryWait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

func (f *Fanout[K]) watch(ctx context.Context) error {
	// A burst of writes must not cut the watch off: it would end every
	// subscriber (ErrRestarting) to list again. Progress marks keep the
	// index moving with the store's, so that a subscriber can be told how
	// current a snapshot is even when nothing watched changed for a while.
	wctx := storage.WithProgressMarks(storage.WithWatchBuffer(ctx, storage.ServerWatchBuffer))
	w, err := f.cfg.Watcher.Watch(wctx, f.cfg.Request)
	if err != nil {
		return err
	}
	defer w.Close()
	for {
		ev, err := w.Next(ctx)
		if err != nil {
			return err
		}
		f.apply(ev)
	}
}

// apply takes one event of the watch.
func (f *Fanout[K]) apply(ev *pbresource.WatchEvent) {
	var key K
	var keyed bool
	if ev.GetOp() == pbresource.WatchEvent_OP_UPSERT {
		key, keyed = f.cfg.Key(ev.GetResource()) // before the lock: subscribers wait on it
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if ev.GetIndex() > f.index {
		f.index = ev.GetIndex()
	}
	switch ev.GetOp() {
	case pbresource.WatchEvent_OP_END_OF_SNAPSHOT:
		if !f.ready {
			f.ready = true
			close(f.readyCh)
		}
	case pbresource.WatchEvent_OP_UPSERT:
		res := ev.GetResource()
		k := keyOf(res.GetId())
		if old, ok := f.where[k]; ok && (!keyed || old != key) {
			// Deleted and created again under another key between two
			// events.
			gone := f.byKey[old][k]
			f.forget(old, k)
			f.sendLocked(old, &pbresource.WatchEvent{Op: pbresource.WatchEvent_OP_DELETE, Resource: gone, Index: ev.GetIndex()})
		}
		if !keyed {
			return
		}
		m := f.byKey[key]
		if m == nil {
			m = make(map[resKey]*pbresource.Resource)
			f.byKey[key] = m
		}
		prev := m[k]
		m[k] = res
		f.where[k] = key
		if prev != nil && f.cfg.Suppress != nil && f.cfg.Suppress(prev, res) {
			return
		}
		f.sendLocked(key, ev)
	case pbresource.WatchEvent_OP_DELETE:
		k := keyOf(ev.GetResource().GetId())
		key, ok := f.where[k]
		if !ok {
			return
		}
		f.forget(key, k)
		f.sendLocked(key, ev)
	}
}

func (f *Fanout[K]) forget(key K, k resKey) {
	delete(f.where, k)
	if m := f.byKey[key]; m != nil {
		delete(m, k)
		if len(m) == 0 {
			delete(f.byKey, key)
		}
	}
}

// sendLocked hands ev to key's subscribers, ending any that is full.
func (f *Fanout[K]) sendLocked(key K, ev *pbresource.WatchEvent) {
	if !f.ready {
		return // nobody subscribes before the snapshot is in
	}
	for s := range f.subs[key] {
		select {
		case s.events <- ev:
		default:
			f.endLocked(s, ErrFellBehind)
		}
	}
}

// reset forgets everything and ends every subscription: the Fanout lists
// again, and its subscribers start over with it.
func (f *Fanout[K]) reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, set := range f.subs {
		for s := range set {
			f.endLocked(s, ErrRestarting)
		}
	}
	f.ready = false
	f.readyCh = make(chan struct{})
	f.byKey = make(map[K]map[resKey]*pbresource.Resource)
	f.where = make(map[resKey]K)
}

func (f *Fanout[K]) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = true
	for _, set := range f.subs {
		for s := range set {
			f.endLocked(s, errStopped)
		}
	}
}

func (f *Fanout[K]) endLocked(s *Subscription[K], err error) {
	if set := f.subs[s.key]; set != nil {
		delete(set, s)
		if len(set) == 0 {
			delete(f.subs, s.key)
		}
	}
	if s.err == nil {
		s.err = err
		close(s.done)
	}
}

// Subscription is one subscriber's stream of a key's events.
type Subscription[K comparable] struct {
	f      *Fanout[K]
	key    K
	events chan *pbresource.WatchEvent
	done   chan struct{}
	err    error // set, under f.mu, before done is closed
}

// Subscribe returns the resources under key now, the index they are as
// of, and a subscription to every change after them. It waits, as long as
// ctx lets it, for the watch's first snapshot, and, up to MinIndexWait,
// for the view to reach minIndex: the index of a view the subscriber has
// already seen, which it must never be shown an older one than. A view
// that does not get there in time fails with Unavailable (this server is
// behind: ask another), or with DataLoss when the cluster itself has not
// committed minIndex (its servers lost their state).
func (f *Fanout[K]) Subscribe(ctx context.Context, key K, minIndex uint64) ([]*pbresource.Resource, uint64, *Subscription[K], error) {
	var deadline <-chan time.Time
	poll := backoff.Waiter{Policy: backoff.Poll}
	for {
		f.mu.Lock()
		if f.stopped {
			f.mu.Unlock()
			return nil, 0, nil, errStopped
		}
		if f.ready && f.index >= minIndex {
			break
		}
		isReady, ready, index := f.ready, f.readyCh, f.index
		f.mu.Unlock()
		if !isReady {
			select {
			case <-ready:
			case <-ctx.Done():
				return nil, 0, nil, status.FromContextError(ctx.Err()).Err()
			}
			continue
		}
		// Ready, but behind what the subscriber saw: wait for the store's
		// progress to carry the view there.
		if deadline == nil {
			t := time.NewTimer(f.cfg.MinIndexWait)
			defer t.Stop()
			deadline = t.C
		}
		t := time.NewTimer(poll.Next())
		select {
		case <-t.C:
		case <-deadline:
			t.Stop()
			return nil, 0, nil, f.behind(ctx, index, minIndex)
		case <-ctx.Done():
			t.Stop()
			return nil, 0, nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	defer f.mu.Unlock()
	snap := make([]*pbresource.Resource, 0, len(f.byKey[key]))
	for _, res := range f.byKey[key] {
		snap = append(snap, res)
	}
	s := &Subscription[K]{f: f, key: key, events: make(chan *pbresource.WatchEvent, f.cfg.Buffer), done: make(chan struct{})}
	set := f.subs[key]
	if set == nil {
		set = make(map[*Subscription[K]]struct{})
		f.subs[key] = set
	}
	set[s] = struct{}{}
	return snap, f.index, s, nil
}

// behind is the error for a view at index that did not reach minIndex.
func (f *Fanout[K]) behind(ctx context.Context, index, minIndex uint64) error {
	if f.cfg.ClusterIndex != nil {
		if ci, err := f.cfg.ClusterIndex(ctx); err == nil && ci < minIndex {
			return status.Errorf(codes.DataLoss,
				"the cluster's log ends at index %d, before index %d that this subscriber has seen: the servers lost their state; list again from scratch", ci, minIndex)
		}
	}
	return status.Errorf(codes.Unavailable,
		"this server's view is at index %d, older than index %d that this subscriber has seen: it is catching up; ask another server", index, minIndex)
}

// Next returns the next event, or the error that ended the subscription,
// or ctx's.
func (s *Subscription[K]) Next(ctx context.Context) (*pbresource.WatchEvent, error) {
	select {
	case ev := <-s.events:
		return ev, nil
	default:
	}
	select {
	case ev := <-s.events:
		return ev, nil
	case <-s.done:
		// Events sent before the end are still delivered, in order.
		select {
		case ev := <-s.events:
			return ev, nil
		default:
		}
		s.f.mu.Lock()
		defer s.f.mu.Unlock()
		return nil, s.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close ends the subscription.
func (s *Subscription[K]) Close() {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	s.f.endLocked(s, errors.New("closed"))
}
