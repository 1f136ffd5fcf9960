package storagetest_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/storage"
	"trellis.dev/trellis/internal/storage/inmem"
	"trellis.dev/trellis/internal/storage/storagetest"
)

// laggingBackend checks the suite itself: it behaves like a Raft follower,
// with writes and strong reads served by a leader store and everything else
// by a local store that applies the leader's changes, in order, a little
// later. A suite that assumed a write is visible locally at once would fail
// here; the Raft backend is run against the suite by its own package.
type laggingBackend struct {
	t        *testing.T
	mu       sync.Mutex // orders changes on the leader and in the log
	leader   *inmem.Store
	follower *inmem.Store
	log      chan func() error
}

func newLaggingBackend(t *testing.T, opts ...inmem.Option) storage.Backend {
	b := &laggingBackend{t: t, leader: inmem.NewStore(), follower: inmem.NewStore(opts...), log: make(chan func() error, 1<<12)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for apply := range b.log {
			// The simulated replication delay; nothing waits for it.
			time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
			if err := apply(); err != nil {
				t.Errorf("follower could not apply a change the leader made: %v", err)
			}
		}
	}()
	t.Cleanup(func() { close(b.log); <-done })
	return b
}

// replicate sends apply to the follower when the leader's index moved.
func (b *laggingBackend) replicate(before uint64, apply func(idx uint64) error) {
	if idx := b.leader.Index(); idx != before {
		b.log <- func() error { return apply(idx) }
	}
}

func (b *laggingBackend) Read(_ context.Context, c storage.ReadConsistency, id *pbresource.ID) (*pbresource.Resource, error) {
	if c == storage.StrongConsistency {
		return b.leader.Read(id)
	}
	return b.follower.Read(id)
}

func (b *laggingBackend) WriteCAS(_ context.Context, res *pbresource.Resource) (*pbresource.Resource, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	before := b.leader.Index()
	out, err := b.leader.WriteCAS(before+1, res)
	c := proto.Clone(res).(*pbresource.Resource)
	b.replicate(before, func(idx uint64) error { _, err := b.follower.WriteCAS(idx, c); return err })
	return out, err
}

func (b *laggingBackend) WriteBatch(_ context.Context, resources []*pbresource.Resource, compares ...*pbresource.Compare) ([]*pbresource.Resource, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	before := b.leader.Index()
	out, err := b.leader.WriteBatch(before+1, resources, compares...)
	cs := make([]*pbresource.Resource, len(resources))
	for i, r := range resources {
		cs[i] = proto.Clone(r).(*pbresource.Resource)
	}
	b.replicate(before, func(idx uint64) error { _, err := b.follower.WriteBatch(idx, cs, compares...); return err })
	return out, err
}

func (b *laggingBackend) DeleteCAS(_ context.Context, id *pbresource.ID, version string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	before := b.leader.Index()
	err := b.leader.DeleteCAS(before+1, id, version)
	c := proto.Clone(id).(*pbresource.ID)
	b.replicate(before, func(idx uint64) error { return b.follower.DeleteCAS(idx, c, version) })
	return err
}

func (b *laggingBackend) List(_ context.Context, c storage.ReadConsistency, typ *pbresource.Type, tenancy *pbresource.Tenancy, prefix string) ([]*pbresource.Resource, error) {
	if c == storage.StrongConsistency {
		return b.leader.List(typ, tenancy, prefix)
	}
	return b.follower.List(typ, tenancy, prefix)
}

func (b *laggingBackend) ListByOwner(_ context.Context, id *pbresource.ID) ([]*pbresource.Resource, error) {
	return b.follower.ListByOwner(id)
}

func (b *laggingBackend) WatchList(_ context.Context, typ *pbresource.Type, tenancy *pbresource.Tenancy, prefix string, since uint64) (storage.Watch, error) {
	return b.follower.WatchList(typ, tenancy, prefix, since, 0)
}

func TestSuiteToleratesALaggingFollower(t *testing.T) {
	storagetest.Test(t, storagetest.Options{
		NewBackend: func(t *testing.T) storage.Backend { return newLaggingBackend(t) },
		NewBackendWithEventHistory: func(t *testing.T, events int) storage.Backend {
			return newLaggingBackend(t, inmem.WithEventHistory(events))
		},
	})
}
