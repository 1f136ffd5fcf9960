package inmem

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-memdb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/storage"
)

// publish hands ev to the ring and to every matching watcher. Called with
// s.mu held.
func (s *Store) publish(ev *pbresource.WatchEvent) {
	s.events.add(ev)
	for w := range s.watchers[keyOf(ev.GetResource().GetId().GetType())] {
		// A watch resumed from an index this store has not reached yet (one
		// another server gave the caller) must not repeat changes up to it.
		if ev.GetIndex() <= w.snapshotIndex || !storage.Matches(ev.GetResource(), w.typ, w.tenancy, w.namePrefix) {
			continue
		}
		select {
		case w.ch <- ev:
			w.marked = ev.GetIndex()
		default:
			w.cutOff(storage.ErrWatchTooSlow)
			delete(s.watchers[keyOf(w.typ)], w)
			delete(s.marked, w)
		}
	}
}

// markProgress tells the watchers that asked for progress marks that
// every change up to idx has been handed to them: an END_OF_SNAPSHOT event
// at idx, after the changes of the update that reached it, those of its
// own type included (the events of one update share its last index, so
// only the mark tells the watcher that it has them all). Marks never cut
// a watcher off: a full watcher gets its mark once it has read its buffer.
// Called with s.mu held.
func (s *Store) markProgress(idx uint64) {
	for w := range s.marked {
		if idx < w.marked || idx <= w.snapshotIndex {
			continue
		}
		select {
		case w.ch <- &pbresource.WatchEvent{Op: pbresource.WatchEvent_OP_END_OF_SNAPSHOT, Index: idx}:
			w.marked = idx
			w.dropped.Store(0)
		default:
			// Everything up to idx is in the buffer: the reader gets the
			// mark once it has read them (Next, lateMark).
			w.dropped.Store(idx)
		}
	}
}

// WatchList starts a watch; see storage.Backend.WatchList. Changes at or
// below sinceIndex are never delivered, even when sinceIndex is ahead of
// this store (a lagging follower asked to resume from an index the leader
// gave the caller): those changes were seen already. The watcher may
// have buffer events unread (0: the store's default; at
// most its maximum) before it is cut off.
func (s *Store) WatchList(typ *pbresource.Type, tenancy *pbresource.Tenancy, namePrefix string, sinceIndex uint64, buffer int) (storage.Watch, error) {
	return s.WatchListWith(typ, tenancy, namePrefix, sinceIndex, storage.WatchOptions{Buffer: buffer})
}

// WatchListWith is WatchList with the options a caller's context carries
// (storage.WatchOptionsFrom): its buffer, and whether it gets progress
// marks.
func (s *Store) WatchListWith(typ *pbresource.Type, tenancy *pbresource.Tenancy, namePrefix string, sinceIndex uint64, opts storage.WatchOptions) (storage.Watch, error) {
	buffer := min(opts.Buffer, s.maxWatcherBuffer)
	if buffer <= 0 {
		buffer = s.watcherBuffer
	}
	w := &watch{
		store:      s,
		typ:        typ,
		tenancy:    tenancy,
		namePrefix: namePrefix,
		ch:         make(chan *pbresource.WatchEvent, buffer),
	}

	s.mu.Lock()
	var txn *memdb.Txn
	if sinceIndex == 0 {
		txn = s.db.Load().Txn(false)
	} else {
		replay, ok := s.events.since(sinceIndex)
		if !ok {
			s.mu.Unlock()
			return nil, storage.ErrIndexTooOld
		}
		for _, ev := range replay {
			if storage.Matches(ev.GetResource(), typ, tenancy, namePrefix) {
				w.pending = append(w.pending, ev)
			}
		}
	}
	w.snapshotIndex = max(s.index.Load(), sinceIndex)
	key := keyOf(typ)
	if s.watchers[key] == nil {
		s.watchers[key] = make(map[*watch]struct{})
	}
	s.watchers[key][w] = struct{}{}
	if opts.ProgressMarks {
		s.marked[w] = struct{}{}
	}
	s.mu.Unlock()

	if txn != nil {
		snapshot, err := list(txn, typ, tenancy, namePrefix)
		if err != nil {
			w.Close()
			return nil, err
		}
		w.pending = make([]*pbresource.WatchEvent, len(snapshot))
		for i, res := range snapshot {
			w.pending[i] = &pbresource.WatchEvent{Op: pbresource.WatchEvent_OP_UPSERT, Resource: res, Index: w.snapshotIndex}
		}
	}
	return w, nil
}

type watch struct {
	store      *Store
	typ        *pbresource.Type
	tenancy    *pbresource.Tenancy
	namePrefix string

	// pending holds the snapshot (or replay) still to be returned, before
	// END_OF_SNAPSHOT; only Next touches it.
	pending       []*pbresource.WatchEvent
	snapshotIndex uint64
	sentEnd       bool
	// marked is the index of the last event or progress mark sent on ch;
	// dropped the index of a mark its full buffer made the store drop,
	// 0 when none (written under the store's mu; see lateMark).
	marked  uint64
	dropped atomic.Uint64

	ch        chan *pbresource.WatchEvent
	closeOnce sync.Once
	err       error // set before ch is closed
}

// cutOff ends the watch with err once its buffered events are read. Called
// with the store's mu held.
func (w *watch) cutOff(err error) {
	w.closeOnce.Do(func() {
		w.err = err
		close(w.ch)
	})
}

func (w *watch) Next(ctx context.Context) (*pbresource.WatchEvent, error) {
	if len(w.pending) > 0 {
		ev := w.pending[0]
		w.pending[0] = nil
		w.pending = w.pending[1:]
		return ev, nil
	}
	if !w.sentEnd {
		w.sentEnd = true
		return &pbresource.WatchEvent{Op: pbresource.WatchEvent_OP_END_OF_SNAPSHOT, Index: w.snapshotIndex}, nil
	}
	select {
	case ev, ok := <-w.ch:
		if !ok {
			return nil, w.err
		}
		return ev, nil
	default:
	}
	if mark := w.lateMark(); mark != nil {
		return mark, nil
	}
	select {
	case ev, ok := <-w.ch:
		if !ok {
			return nil, w.err
		}
		return ev, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// lateMark returns, once the watcher has read everything it was handed,
// the progress mark that its full buffer made the store drop (nil when
// there is none): without it an idle store would leave the watcher's view
// looking older than it is.
func (w *watch) lateMark() *pbresource.WatchEvent {
	if w.dropped.Load() == 0 {
		return nil
	}
	s := w.store
	s.mu.Lock()
	defer s.mu.Unlock()
	idx := w.dropped.Load()
	if idx == 0 || len(w.ch) > 0 {
		return nil
	}
	w.dropped.Store(0)
	return &pbresource.WatchEvent{Op: pbresource.WatchEvent_OP_END_OF_SNAPSHOT, Index: idx}
}

// Close stops the watch. It is safe to call more than once.
func (w *watch) Close() {
	s := w.store
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.watchers[keyOf(w.typ)], w)
	delete(s.marked, w)
	w.cutOff(context.Canceled)
}
