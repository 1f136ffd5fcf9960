package inmem

import (
	"context"
	"sync"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/storage"
)

// Backend is a storage.Backend held entirely in this process: every read is
// strongly consistent and this process is always the leader.
type Backend struct {
	store *Store
	// mu picks the next index and applies at it in one step.
	mu       sync.Mutex
	leaderCh chan bool
}

var (
	_ storage.Backend    = (*Backend)(nil)
	_ storage.Leadership = (*Backend)(nil)
)

// NewBackend returns an empty in-memory backend.
func NewBackend(opts ...Option) *Backend {
	ch := make(chan bool, 1)
	ch <- true
	return &Backend{store: NewStore(opts...), leaderCh: ch}
}

// Store exposes the underlying store (for snapshots in tests and dev mode).
func (b *Backend) Store() *Store { return b.store }

// LeaderCh reports leadership: always true.
func (b *Backend) LeaderCh() <-chan bool { return b.leaderCh }

func (b *Backend) Read(_ context.Context, _ storage.ReadConsistency, id *pbresource.ID) (*pbresource.Resource, error) {
	return b.store.Read(id)
}

func (b *Backend) WriteCAS(_ context.Context, res *pbresource.Resource) (*pbresource.Resource, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.store.WriteCAS(b.store.Index()+1, res)
}

func (b *Backend) WriteBatch(_ context.Context, resources []*pbresource.Resource, compares ...*pbresource.Compare) ([]*pbresource.Resource, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.store.WriteBatch(b.store.Index()+1, resources, compares...)
}

func (b *Backend) DeleteCAS(_ context.Context, id *pbresource.ID, version string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.store.DeleteCAS(b.store.Index()+1, id, version)
}

func (b *Backend) List(_ context.Context, _ storage.ReadConsistency, typ *pbresource.Type, tenancy *pbresource.Tenancy, namePrefix string) ([]*pbresource.Resource, error) {
	return b.store.List(typ, tenancy, namePrefix)
}

func (b *Backend) ListByOwner(_ context.Context, id *pbresource.ID) ([]*pbresource.Resource, error) {
	return b.store.ListByOwner(id)
}

func (b *Backend) WatchList(ctx context.Context, typ *pbresource.Type, tenancy *pbresource.Tenancy, namePrefix string, sinceIndex uint64) (storage.Watch, error) {
	return b.store.WatchListWith(typ, tenancy, namePrefix, sinceIndex, storage.WatchOptionsFrom(ctx))
}
