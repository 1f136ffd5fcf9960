package inmem

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-memdb"
	"google.golang.org/protobuf/proto"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/storage"
)

// Defaults for the event ring and per-watcher buffers. The ring keeps the
// resources of its events alive (old versions too), so it is a trade of
// memory against how far back a broken watch can resume; one that cannot
// lists again. Small resources fill the ring's count first (16,384 events
// of 256-byte resources hold about 13 MiB); large ones its bytes.
const (
	DefaultEventHistory      = 1 << 14
	DefaultEventHistoryBytes = 64 << 20
	DefaultWatcherBuffer     = 1 << 11
)

// Store is the in-memory resource state. Reads run concurrently on MVCC
// snapshots; changes are serialized.
type Store struct {
	// db is replaced as a whole by Restore while readers may be using it.
	db atomic.Pointer[memdb.MemDB]

	// mu serializes changes and the registration of watchers, so that a
	// watcher sees exactly the changes after its snapshot.
	mu       sync.Mutex
	index    atomic.Uint64
	events   eventRing
	watchers map[typeKey]map[*watch]struct{}
	// marked are the watchers that asked for progress marks
	// (storage.WithProgressMarks), also in watchers.
	marked map[*watch]struct{}
	// next passes a write's id-index key to the schema of the current db.
	next *nextKey

	watcherBuffer int
	// maxWatcherBuffer caps what a watcher may ask for
	// (storage.WithWatchBuffer).
	maxWatcherBuffer int

	// shared holds one copy of each type and data type URL, which every
	// stored resource of that type points to instead of its own.
	shared interned
}

// Option configures a Store.
type Option func(*Store)

// WithEventHistory sets how many past events are kept for resuming watches.
func WithEventHistory(n int) Option {
	return func(s *Store) { s.events = newEventRing(n, s.events.maxBytes) }
}

// WithEventHistoryBytes bounds the estimated size of the resources the
// past events keep alive.
func WithEventHistoryBytes(n int) Option {
	return func(s *Store) { s.events = newEventRing(len(s.events.buf), n) }
}

// WithWatcherBuffer sets how many events a watcher may have unread before it
// is cut off.
func WithWatcherBuffer(n int) Option { return func(s *Store) { s.watcherBuffer = n } }

// WithMaxWatcherBuffer caps the buffer a watcher may ask for with
// storage.WithWatchBuffer (default storage.ServerWatchBuffer).
func WithMaxWatcherBuffer(n int) Option { return func(s *Store) { s.maxWatcherBuffer = n } }

// NewStore returns an empty store at index 0.
func NewStore(opts ...Option) *Store {
	next := &nextKey{}
	db, err := newDB(next)
	if err != nil {
		panic(fmt.Sprintf("inmem: invalid schema: %v", err)) // a programming error
	}
	s := &Store{
		events:           newEventRing(DefaultEventHistory, DefaultEventHistoryBytes),
		watchers:         make(map[typeKey]map[*watch]struct{}),
		marked:           make(map[*watch]struct{}),
		next:             next,
		watcherBuffer:    DefaultWatcherBuffer,
		maxWatcherBuffer: storage.ServerWatchBuffer,
	}
	s.db.Store(db)
	for _, o := range opts {
		o(s)
	}
	return s
}

// Index is the index of the last change applied.
func (s *Store) Index() uint64 { return s.index.Load() }

// Read returns the stored resource named by id.
func (s *Store) Read(id *pbresource.ID) (*pbresource.Resource, error) {
	txn := s.db.Load().Txn(false)
	res, err := get(txn, id)
	if err != nil {
		return nil, err
	}
	if res == nil {
		return nil, storage.ErrNotFound
	}
	if id.GetUid() != "" && id.GetUid() != res.GetId().GetUid() {
		return nil, storage.ErrWrongUID
	}
	return res, nil
}

// List returns the resources matching the query, ordered by namespace, name.
func (s *Store) List(typ *pbresource.Type, tenancy *pbresource.Tenancy, namePrefix string) ([]*pbresource.Resource, error) {
	return list(s.db.Load().Txn(false), typ, tenancy, namePrefix)
}

// ListByOwner returns the resources owned by id.
func (s *Store) ListByOwner(id *pbresource.ID) ([]*pbresource.Resource, error) {
	it, err := s.db.Load().Txn(false).Get(tableResources, indexOwner, id)
	if err != nil {
		return nil, err
	}
	var out []*pbresource.Resource
	for obj := it.Next(); obj != nil; obj = it.Next() {
		out = append(out, obj.(*pbresource.Resource))
	}
	return out, nil
}

// WriteCAS stores res at index idx under the rules of storage.Backend. It
// stores a copy: the caller keeps its resource.
func (s *Store) WriteCAS(idx uint64, res *pbresource.Resource) (*pbresource.Resource, error) {
	return s.ApplyCAS(idx, proto.Clone(res).(*pbresource.Resource))
}

// WriteBatch stores every resource at index idx, or none of them, when
// every compare holds. It stores copies: the caller keeps its resources.
func (s *Store) WriteBatch(idx uint64, resources []*pbresource.Resource, compares ...*pbresource.Compare) ([]*pbresource.Resource, error) {
	copies := make([]*pbresource.Resource, len(resources))
	for i, res := range resources {
		copies[i] = proto.Clone(res).(*pbresource.Resource)
	}
	return s.ApplyBatch(idx, copies, compares...)
}

// ApplyBatch is WriteBatch for a caller that hands its resources over:
// they are stored as they are (their versions set), saving a copy of
// each. The caller must not use them afterwards.
func (s *Store) ApplyBatch(idx uint64, resources []*pbresource.Resource, compares ...*pbresource.Compare) (out []*pbresource.Resource, err error) {
	s.Update(func(tx *Tx) { out, err = tx.WriteBatch(idx, resources, compares...) })
	return out, err
}

// ApplyCAS is WriteCAS with ApplyBatch's hand-over of res.
func (s *Store) ApplyCAS(idx uint64, res *pbresource.Resource) (out *pbresource.Resource, err error) {
	s.Update(func(tx *Tx) { out, err = tx.WriteCAS(idx, res) })
	return out, err
}

// DeleteCAS deletes the resource named by id at index idx.
func (s *Store) DeleteCAS(idx uint64, id *pbresource.ID, version string) error {
	var err error
	s.Update(func(tx *Tx) { err = tx.DeleteCAS(idx, id, version) })
	return err
}

// insert inserts res, whose id-index key is key, into txn. Called with
// s.mu held.
func (s *Store) insert(txn *memdb.Txn, res *pbresource.Resource, key []byte) error {
	s.next.res, s.next.key = res, key
	defer func() { s.next.res, s.next.key = nil, nil }()
	return txn.Insert(tableResources, res)
}

// remove deletes res, whose id-index key is key, from txn. Called with
// s.mu held.
func (s *Store) remove(txn *memdb.Txn, res *pbresource.Resource, key []byte) error {
	s.next.res, s.next.key = res, key
	defer func() { s.next.res, s.next.key = nil, nil }()
	return txn.Delete(tableResources, res)
}

// setIndex records idx as the latest change; indexes never go backwards.
func (s *Store) setIndex(idx uint64) {
	if idx > s.index.Load() {
		s.index.Store(idx)
	}
}

// ForEach calls fn for every stored resource, on a consistent snapshot, and
// returns the index of that snapshot. It is what the Raft FSM snapshots.
func (s *Store) ForEach(fn func(*pbresource.Resource) error) (uint64, error) {
	s.mu.Lock()
	txn := s.db.Load().Txn(false)
	idx := s.index.Load()
	s.mu.Unlock()
	it, err := txn.Get(tableResources, indexID+"_prefix", []byte{})
	if err != nil {
		return 0, err
	}
	for obj := it.Next(); obj != nil; obj = it.Next() {
		if err := fn(obj.(*pbresource.Resource)); err != nil {
			return 0, err
		}
	}
	return idx, nil
}

// Restore replaces the whole state with resources at index idx. Every
// watcher is cut off with storage.ErrIndexTooOld, since the changes between
// what it saw and the restored state are unknown.
func (s *Store) Restore(idx uint64, resources []*pbresource.Resource) error {
	// The resources may be stored ones (what ForEach gave) that readers
	// hold, so their names are left alone: the index builds its own keys.
	next := &nextKey{}
	db, err := newDB(next)
	if err != nil {
		return err
	}
	txn := db.Txn(true)
	for _, res := range resources {
		s.intern(res)
		if err := txn.Insert(tableResources, res); err != nil {
			txn.Abort()
			return err
		}
	}
	txn.Commit()

	s.mu.Lock()
	defer s.mu.Unlock()
	s.db.Store(db)
	s.next = next
	s.index.Store(idx)
	s.events.reset(idx)
	for _, set := range s.watchers {
		for w := range set {
			w.cutOff(storage.ErrIndexTooOld)
		}
	}
	s.watchers = make(map[typeKey]map[*watch]struct{})
	s.marked = make(map[*watch]struct{})
	return nil
}

// newDB returns an empty database without go-memdb's watch channels. A
// primary memdb tracks, in every write transaction, the channel of each
// radix-tree node it replaces (a map entry per node) and closes them all
// on commit, for readers blocked in a WatchSet. The store publishes its
// own events and no reader waits on memdb; a snapshot of an empty primary
// is the same database with that tracking off (its channels are never
// closed, so a WatchSet over it would never fire).
func newDB(next *nextKey) (*memdb.MemDB, error) {
	db, err := memdb.NewMemDB(newSchema(next))
	if err != nil {
		return nil, err
	}
	return db.Snapshot(), nil
}

func get(txn *memdb.Txn, id *pbresource.ID) (*pbresource.Resource, error) {
	return getByKey(txn, nameKey(id))
}

// getByKey looks a resource up by its id-index key (nameKey).
func getByKey(txn *memdb.Txn, key []byte) (*pbresource.Resource, error) {
	obj, err := txn.First(tableResources, indexID, key)
	if err != nil || obj == nil {
		return nil, err
	}
	return obj.(*pbresource.Resource), nil
}

func list(txn *memdb.Txn, typ *pbresource.Type, tenancy *pbresource.Tenancy, namePrefix string) ([]*pbresource.Resource, error) {
	it, err := txn.Get(tableResources, indexID+"_prefix", listPrefix(typ, tenancy, namePrefix))
	if err != nil {
		return nil, err
	}
	var out []*pbresource.Resource
	for obj := it.Next(); obj != nil; obj = it.Next() {
		res := obj.(*pbresource.Resource)
		if storage.Matches(res, typ, tenancy, namePrefix) {
			out = append(out, res)
		}
	}
	return out, nil
}

// checkCAS applies the compare-and-swap rule of storage.Backend.WriteCAS.
func checkCAS(existing, res *pbresource.Resource) error {
	if existing == nil {
		if res.GetVersion() != "" {
			return fmt.Errorf("%w (it does not exist)", storage.ErrCASFailure)
		}
		return nil
	}
	if res.GetVersion() == "" {
		return fmt.Errorf("%w (it already exists)", storage.ErrCASFailure)
	}
	if existing.GetId().GetUid() != res.GetId().GetUid() {
		return storage.ErrWrongUID
	}
	if existing.GetVersion() != res.GetVersion() {
		return storage.ErrCASFailure
	}
	return nil
}

// batchError names the part of a batch that failed its check: a member
// (a write) or a compare, by its index among its kind.
type batchError struct {
	part  string // "member" or "compare"
	index int
	id    *pbresource.ID
	err   error
}

func (e *batchError) Error() string {
	return fmt.Sprintf("%s: %s %d (%s): %v", storage.ErrBatchConflict, e.part, e.index, ids.String(e.id), e.err)
}

func (e *batchError) Unwrap() []error { return []error{storage.ErrBatchConflict, e.err} }

// unwrapBatch turns the batch error of a one-member batch into its cause.
func unwrapBatch(err error) error {
	if be, ok := err.(*batchError); ok {
		return be.err
	}
	return err
}
