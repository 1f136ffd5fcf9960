package assignments

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage"
)

// Defaults of a Hub.
const (
	// DefaultSubscriberBuffer is how many events a subscriber may have
	// unsent before it is ended (and starts over with a snapshot).
	DefaultSubscriberBuffer = 1024
	// retryWait is the pause before the hub's watch is opened again.
	retryWait = 500 * time.Millisecond
	// DefaultMinIndexWait bounds how long a subscriber waits for the hub's
	// view to reach the index it has seen before it is sent elsewhere.
	DefaultMinIndexWait = 5 * time.Second
)

// Errors that end a subscription; both are OutOfRange: open it again.
var (
	ErrFellBehind = status.Error(codes.OutOfRange, "the task stream fell behind: open it again")
	ErrRestarting = status.Error(codes.OutOfRange, "the server lists the tasks again: open the task stream again")
	errStopped    = status.Error(codes.Unavailable, "the server is stopping")
)

// ClusterIndex returns how far the cluster's committed log reaches (the
// leader's commit index): what an index an agent has seen must be at or
// below, unless the servers lost their state.
type ClusterIndex func(ctx context.Context) (uint64, error)

// taskKey names a task: namespace and name.
type taskKey struct{ namespace, name string }

func keyOf(id *pbresource.ID) taskKey {
	return taskKey{id.GetTenancy().GetNamespace(), id.GetName()}
}

// Hub indexes the tasks by instance and streams each instance's to its
// subscribers.
type Hub struct {
	api    resource.API
	log    *slog.Logger
	buffer int
	// minIndexWait: see DefaultMinIndexWait. clusterIndex, when set, tells
	// a server that is merely behind from a cluster that lost its state.
	minIndexWait time.Duration
	clusterIndex ClusterIndex

	mu sync.Mutex
	// ready: the hub's watch has delivered its snapshot; readyCh is closed
	// then (and replaced when the hub starts over).
	ready   bool
	readyCh chan struct{}
	stopped bool
	// index is how current the hub's view is: every change up to it has
	// been applied (events and the store's progress marks).
	index  uint64
	byInst map[string]map[taskKey]*pbresource.Resource
	where  map[taskKey]string
	subs   map[string]map[*Subscription]struct{}

	definitions definitionCache
}

// NewHub returns a hub reading tasks through api (an in-process resource
// service). Start runs it.
func NewHub(api resource.API, log *slog.Logger) *Hub {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Hub{
		api: api, log: log, buffer: DefaultSubscriberBuffer, minIndexWait: DefaultMinIndexWait,
		readyCh: make(chan struct{}),
		byInst:  make(map[string]map[taskKey]*pbresource.Resource),
		where:   make(map[taskKey]string),
		subs:    make(map[string]map[*Subscription]struct{}),
	}
}

// SetClusterIndex tells the hub how to learn the cluster's commit index
// (a Raft server's); without it, an index the hub's view does not reach in
// time is taken as this server's lag.
func (h *Hub) SetClusterIndex(f ClusterIndex) { h.clusterIndex = f }

// Start watches the tasks until ctx ends, starting over (a fresh listing)
// whenever the watch fails.
func (h *Hub) Start(ctx context.Context) error {
	defer h.stop()
	for {
		err := h.watch(ctx)
		if ctx.Err() != nil {
			return nil
		}
		h.log.Info("task watch ended; listing the tasks again", "err", err)
		h.reset()
		t := time.NewTimer(retryWait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

func (h *Hub) watch(ctx context.Context) error {
	// A burst of placements must not cut the hub's watch off: it would
	// end every agent's task stream (ErrRestarting) to list again.
	// Progress marks keep the hub's index moving with the store's, so that
	// it can tell an agent how current a snapshot is even when no task
	// changed for a while.
	wctx := storage.WithProgressMarks(storage.WithWatchBuffer(ctx, storage.ServerWatchBuffer))
	w, err := h.api.Watch(wctx, &pbresource.WatchListRequest{
		Type:    orchestrator.TaskType,
		Tenancy: &pbresource.Tenancy{Namespace: ids.WildcardNamespace},
	})
	if err != nil {
		return err
	}
	defer w.Close()
	for {
		ev, err := w.Next(ctx)
		if err != nil {
			return err
		}
		h.apply(ev)
	}
}

// apply takes one event of the hub's watch.
func (h *Hub) apply(ev *pbresource.WatchEvent) {
	var task *pborch.Task // decoded before the lock: subscribers wait on it
	if ev.GetOp() == pbresource.WatchEvent_OP_UPSERT {
		task = taskOf(ev.GetResource())
	}
	inst := task.GetInstance()
	h.mu.Lock()
	defer h.mu.Unlock()
	if ev.GetIndex() > h.index {
		h.index = ev.GetIndex()
	}
	switch ev.GetOp() {
	case pbresource.WatchEvent_OP_END_OF_SNAPSHOT:
		if !h.ready {
			h.ready = true
			close(h.readyCh)
		}
	case pbresource.WatchEvent_OP_UPSERT:
		res := ev.GetResource()
		k := keyOf(res.GetId())
		if old, ok := h.where[k]; ok && old != inst {
			// Deleted and placed again elsewhere between two events.
			gone := h.byInst[old][k]
			h.forget(old, k)
			h.sendLocked(old, &pbresource.WatchEvent{Op: pbresource.WatchEvent_OP_DELETE, Resource: gone, Index: ev.GetIndex()})
		}
		if inst == "" {
			return
		}
		m := h.byInst[inst]
		if m == nil {
			m = make(map[taskKey]*pbresource.Resource)
			h.byInst[inst] = m
		}
		prev := m[k]
		m[k] = res
		h.where[k] = inst
		if prev != nil && orchestrator.IsAgentReport(prev, res, task) {
			// The agent's own report: it has it from its write. Echoing
			// each report back would double what every agent receives.
			return
		}
		h.sendLocked(inst, ev)
	case pbresource.WatchEvent_OP_DELETE:
		k := keyOf(ev.GetResource().GetId())
		inst, ok := h.where[k]
		if !ok {
			return
		}
		h.forget(inst, k)
		h.sendLocked(inst, ev)
	}
}

func (h *Hub) forget(inst string, k taskKey) {
	delete(h.where, k)
	if m := h.byInst[inst]; m != nil {
		delete(m, k)
		if len(m) == 0 {
			delete(h.byInst, inst)
		}
	}
}

// taskOf is a task's data; nil (so no instance, and no agent is told of
// it) when it does not decode.
func taskOf(res *pbresource.Resource) *pborch.Task {
	t, err := resource.DecodeData[*pborch.Task](res)
	if err != nil {
		return nil
	}
	return t
}

// sendLocked hands ev to inst's subscribers, ending any that is full.
func (h *Hub) sendLocked(inst string, ev *pbresource.WatchEvent) {
	if !h.ready {
		return // nobody subscribes before the snapshot is in
	}
	for s := range h.subs[inst] {
		select {
		case s.events <- ev:
		default:
			h.endLocked(s, ErrFellBehind)
		}
	}
}

// reset forgets everything and ends every subscription: the hub lists the
// tasks again, and its subscribers start over with it.
func (h *Hub) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, set := range h.subs {
		for s := range set {
			h.endLocked(s, ErrRestarting)
		}
	}
	h.ready = false
	h.readyCh = make(chan struct{})
	h.byInst = make(map[string]map[taskKey]*pbresource.Resource)
	h.where = make(map[taskKey]string)
}

func (h *Hub) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopped = true
	for _, set := range h.subs {
		for s := range set {
			h.endLocked(s, errStopped)
		}
	}
}

func (h *Hub) endLocked(s *Subscription, err error) {
	if set := h.subs[s.instance]; set != nil {
		delete(set, s)
		if len(set) == 0 {
			delete(h.subs, s.instance)
		}
	}
	if s.err == nil {
		s.err = err
		close(s.done)
	}
}

// Subscription is one subscriber's stream of an instance's task events.
type Subscription struct {
	hub      *Hub
	instance string
	events   chan *pbresource.WatchEvent
	done     chan struct{}
	err      error // set, under hub.mu, before done is closed
}

// Subscribe returns the tasks placed on instance now, the index they are
// as of, and a subscription to every change after them. It waits, as long
// as ctx lets it, for the hub's first snapshot, and, up to minIndexWait,
// for the hub's view to reach minIndex: the index of a view the
// subscriber has already seen, which it must never be shown an older one
// than. A view that does not get there in time fails with Unavailable (this
// server is behind: ask another), or with DataLoss when the cluster itself
// has not committed minIndex (its servers lost their state).
func (h *Hub) Subscribe(ctx context.Context, instance string, minIndex uint64) ([]*pbresource.Resource, uint64, *Subscription, error) {
	var deadline <-chan time.Time
	poll := time.Millisecond
	for {
		h.mu.Lock()
		if h.stopped {
			h.mu.Unlock()
			return nil, 0, nil, errStopped
		}
		if h.ready && h.index >= minIndex {
			break
		}
		isReady, ready, index := h.ready, h.readyCh, h.index
		h.mu.Unlock()
		if !isReady {
			select {
			case <-ready:
			case <-ctx.Done():
				return nil, 0, nil, status.FromContextError(ctx.Err()).Err()
			}
			continue
		}
		// Ready, but behind what the subscriber saw: wait for the
		// store's progress to carry the view there.
		if deadline == nil {
			t := time.NewTimer(h.minIndexWait)
			defer t.Stop()
			deadline = t.C
		}
		t := time.NewTimer(poll)
		poll = min(poll*2, 50*time.Millisecond)
		select {
		case <-t.C:
		case <-deadline:
			t.Stop()
			return nil, 0, nil, h.behind(ctx, index, minIndex)
		case <-ctx.Done():
			t.Stop()
			return nil, 0, nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	defer h.mu.Unlock()
	snap := make([]*pbresource.Resource, 0, len(h.byInst[instance]))
	for _, res := range h.byInst[instance] {
		snap = append(snap, res)
	}
	s := &Subscription{hub: h, instance: instance, events: make(chan *pbresource.WatchEvent, h.buffer), done: make(chan struct{})}
	set := h.subs[instance]
	if set == nil {
		set = make(map[*Subscription]struct{})
		h.subs[instance] = set
	}
	set[s] = struct{}{}
	return snap, h.index, s, nil
}

// behind is the error for a view at index that did not reach minIndex.
func (h *Hub) behind(ctx context.Context, index, minIndex uint64) error {
	if h.clusterIndex != nil {
		if ci, err := h.clusterIndex(ctx); err == nil && ci < minIndex {
			return status.Errorf(codes.DataLoss,
				"the cluster's log ends at index %d, before index %d that this agent has seen: the servers lost their state; list the tasks again from scratch", ci, minIndex)
		}
	}
	return status.Errorf(codes.Unavailable,
		"this server's view of the tasks is at index %d, older than index %d that this agent has seen: it is catching up; ask another server", index, minIndex)
}

// Next returns the next event, or the error that ended the subscription,
// or ctx's.
func (s *Subscription) Next(ctx context.Context) (*pbresource.WatchEvent, error) {
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
		s.hub.mu.Lock()
		defer s.hub.mu.Unlock()
		return nil, s.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close ends the subscription.
func (s *Subscription) Close() {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	s.hub.endLocked(s, errors.New("closed"))
}
