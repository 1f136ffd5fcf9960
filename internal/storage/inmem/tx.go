package inmem

import (
	"fmt"
	"slices"
	"strconv"
	"unsafe"

	"github.com/hashicorp/go-memdb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/storage"
)

// Tx is a group of changes that Store.Update applies in one go-memdb
// transaction: one commit, and one copy of each radix-tree node the group
// touches instead of one per change (the copying of those paths was the
// largest cost of a write on the Raft apply path). Each change keeps its
// own index, and so its own version and watch events, and succeeds or
// fails alone, exactly as if it were applied by itself: a group leaves the
// same state and publishes the same events, in the same order, as its
// changes applied one by one. That is what lets the Raft FSM group the
// entries raft hands it together, whose boundaries differ from server to
// server and from run to run.
//
// The changes hand their resources over, as to ApplyBatch: they are
// stored as they are, and the caller must not use them afterwards.
type Tx struct {
	s  *Store
	db *memdb.MemDB
	// txn is started by the first change that writes.
	txn *memdb.Txn
	// before is the state before the group. Lookups go to written first,
	// then to before, never through txn: a read through a write
	// transaction clones its index and so drops the transaction's cache of
	// the tree nodes it has copied, and the next insert copies its whole
	// path again.
	before *memdb.Txn
	// written holds what the group has stored under each key it changed;
	// nil for a key it deleted.
	written map[string]*pbresource.Resource
	// events are the group's changes, in order, published once it commits;
	// they are also what redoes the changes that succeeded should a later
	// one fail halfway through its inserts.
	events []*pbresource.WatchEvent
	index  uint64
}

// Update runs fn with a Tx and then commits what its changes did, sets the
// store's index to the last change that succeeded, and publishes the
// changes' events in order. Watchers and readers see the group's changes
// all at once.
func (s *Store) Update(fn func(*Tx)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	db := s.db.Load()
	tx := &Tx{s: s, db: db, before: db.Txn(false)}
	defer func() {
		if tx.txn != nil {
			tx.txn.Abort() // a no-op once committed; releases the writer if fn panicked
		}
	}()
	fn(tx)
	if tx.txn == nil {
		return
	}
	tx.txn.Commit()
	if tx.index != 0 {
		s.setIndex(tx.index)
	}
	for _, ev := range tx.events {
		s.publish(ev)
	}
	if tx.index != 0 {
		s.markProgress(tx.index)
	}
}

// lookup returns what key holds in the group's state so far.
func (tx *Tx) lookup(key []byte) (*pbresource.Resource, error) {
	if res, ok := tx.written[unsafe.String(unsafe.SliceData(key), len(key))]; ok {
		return res, nil
	}
	return getByKey(tx.before, key)
}

func (tx *Tx) writer() *memdb.Txn {
	if tx.txn == nil {
		tx.txn = tx.db.Txn(true)
	}
	return tx.txn
}

// WriteCAS stores res at index idx under the rules of
// storage.Backend.WriteCAS.
func (tx *Tx) WriteCAS(idx uint64, res *pbresource.Resource) (*pbresource.Resource, error) {
	out, err := tx.WriteBatch(idx, []*pbresource.Resource{res})
	if err != nil {
		return nil, unwrapBatch(err)
	}
	return out[0], nil
}

// WriteBatch stores every resource at index idx, or none of them, and
// only when every compare holds (storage.Backend.WriteBatch).
func (tx *Tx) WriteBatch(idx uint64, resources []*pbresource.Resource, compares ...*pbresource.Compare) ([]*pbresource.Resource, error) {
	// Check every member before storing any: a refused batch leaves
	// nothing behind, and nothing of the group's earlier changes is undone.
	// The compares go first: they see the state before the batch.
	if err := tx.checkCompares(compares); err != nil {
		return nil, err
	}
	if len(resources) == 0 {
		return []*pbresource.Resource{}, nil
	}
	keys := make([][]byte, len(resources))
	// seen finds a repeated name; it becomes the group's written map when
	// the group has none yet (a batch alone in its group).
	var seen map[string]*pbresource.Resource
	if len(resources) > 1 {
		seen = make(map[string]*pbresource.Resource, len(resources))
	}
	for i, res := range resources {
		key := nameKey(res.GetId())
		if seen != nil {
			// key is never changed once built, so a string over it is safe.
			skey := unsafe.String(unsafe.SliceData(key), len(key))
			if _, dup := seen[skey]; dup {
				return nil, fmt.Errorf("%w: %s appears twice", storage.ErrBatchConflict, ids.String(res.GetId()))
			}
			seen[skey] = res
		}
		existing, err := tx.lookup(key)
		if err != nil {
			return nil, err
		}
		if err := checkCAS(existing, res); err != nil {
			return nil, &batchError{part: "member", index: i, id: res.GetId(), err: err}
		}
		keys[i] = key
	}

	txn := tx.writer()
	for i, res := range resources {
		// An insert cannot fail for a resource with an id, which every
		// member has; should one fail all the same, the batch must leave
		// nothing behind, as it would alone: redo the group without it.
		// The indexes read nothing that the loop below changes, so the
		// members stay untouched until every insert has succeeded.
		if err := tx.s.insert(txn, res, keys[i]); err != nil {
			tx.redo()
			return nil, err
		}
	}
	version := strconv.FormatUint(idx, 10)
	for i, res := range resources {
		res.Version = version
		tx.s.intern(res)
		shareName(res, keys[i])
	}
	switch {
	case tx.written == nil && seen != nil:
		tx.written = seen
	case tx.written == nil:
		tx.written = make(map[string]*pbresource.Resource, len(resources))
		fallthrough
	default:
		for i, res := range resources {
			tx.written[unsafe.String(unsafe.SliceData(keys[i]), len(keys[i]))] = res
		}
	}
	tx.events = slices.Grow(tx.events, len(resources))
	for _, res := range resources {
		tx.events = append(tx.events, &pbresource.WatchEvent{Op: pbresource.WatchEvent_OP_UPSERT, Resource: res, Index: idx})
	}
	tx.index = idx
	return resources, nil
}

// DeleteCAS deletes the resource named by id at index idx under the rules
// of storage.Backend.DeleteCAS.
func (tx *Tx) DeleteCAS(idx uint64, id *pbresource.ID, version string) error {
	key := nameKey(id)
	existing, err := tx.lookup(key)
	if err != nil {
		return err
	}
	if existing == nil || (id.GetUid() != "" && id.GetUid() != existing.GetId().GetUid()) {
		return nil
	}
	if version != "" && version != existing.GetVersion() {
		return storage.ErrCASFailure
	}
	if err := tx.s.remove(tx.writer(), existing, key); err != nil {
		tx.redo()
		return err
	}
	if tx.written == nil {
		tx.written = make(map[string]*pbresource.Resource)
	}
	tx.written[unsafe.String(unsafe.SliceData(key), len(key))] = nil
	tx.events = append(tx.events, &pbresource.WatchEvent{Op: pbresource.WatchEvent_OP_DELETE, Resource: existing, Index: idx})
	tx.index = idx
	return nil
}

// redo replaces a transaction that a change left halfway with a new one
// holding the group's earlier changes (its events), so that the failed
// change leaves nothing behind, as it would have applied alone. A redone
// change cannot fail: it succeeded on this same state before.
func (tx *Tx) redo() {
	tx.txn.Abort()
	tx.txn = tx.db.Txn(true)
	for _, ev := range tx.events {
		res := ev.GetResource()
		var err error
		if ev.GetOp() == pbresource.WatchEvent_OP_DELETE {
			err = tx.s.remove(tx.txn, res, nameKey(res.GetId()))
		} else {
			err = tx.s.insert(tx.txn, res, nameKey(res.GetId()))
		}
		if err != nil {
			panic(fmt.Sprintf("inmem: redoing a change that succeeded on this state failed: %v", err))
		}
	}
}
