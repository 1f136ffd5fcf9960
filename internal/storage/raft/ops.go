package raft

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"

	pbresource "trellis.dev/trellis/api/resource/v1"
	pbstorage "trellis.dev/trellis/api/storage/v1"
	"trellis.dev/trellis/internal/storage"
)

// Read implements storage.Backend. An eventual read is served from the local
// store, once this server has caught up with a leader since its start
// (see catchup.go); a strong one by the leader (forwarded from a follower),
// or, for a sealed type, by a follower's own store after the leader's read
// index (sealed.go).
func (b *Backend) Read(ctx context.Context, consistency storage.ReadConsistency, id *pbresource.ID) (*pbresource.Resource, error) {
	if consistency != storage.StrongConsistency {
		if err := b.awaitCaughtUp(ctx); err != nil {
			return nil, err
		}
		return b.store.Read(id)
	}
	return onLeader(ctx, b,
		func(ctx context.Context) (*pbresource.Resource, error) {
			if err := b.consistent(ctx); err != nil {
				return nil, err
			}
			return b.store.Read(id)
		},
		func(ctx context.Context, conn *grpc.ClientConn) (*pbresource.Resource, error) {
			if b.sealed(id.GetType()) {
				return readIndexed(ctx, b, conn, func() (*pbresource.Resource, error) { return b.store.Read(id) })
			}
			return b.readRemote(ctx, conn, id)
		})
}

// WriteCAS implements storage.Backend through the Raft log.
func (b *Backend) WriteCAS(ctx context.Context, res *pbresource.Resource) (*pbresource.Resource, error) {
	out, err := b.apply(ctx, writeCommand(res))
	if err != nil {
		return nil, err
	}
	if len(out) != 1 {
		return nil, invalid("write returned %d resources", len(out))
	}
	return out[0], nil
}

// WriteBatch implements storage.Backend: the whole batch, compares
// included, is one log entry. A batch of compares alone goes through the
// log too: that is what makes its answer current.
func (b *Backend) WriteBatch(ctx context.Context, resources []*pbresource.Resource, compares ...*pbresource.Compare) ([]*pbresource.Resource, error) {
	if len(resources) == 0 && len(compares) == 0 {
		return []*pbresource.Resource{}, nil
	}
	return b.apply(ctx, writeBatchCommand(resources, compares))
}

// DeleteCAS implements storage.Backend through the Raft log.
func (b *Backend) DeleteCAS(ctx context.Context, id *pbresource.ID, version string) error {
	_, err := b.apply(ctx, deleteCommand(id, version))
	return err
}

// List implements storage.Backend, like Read.
func (b *Backend) List(ctx context.Context, consistency storage.ReadConsistency, typ *pbresource.Type, tenancy *pbresource.Tenancy, namePrefix string) ([]*pbresource.Resource, error) {
	if consistency != storage.StrongConsistency {
		if err := b.awaitCaughtUp(ctx); err != nil {
			return nil, err
		}
		return b.store.List(typ, tenancy, namePrefix)
	}
	return onLeader(ctx, b,
		func(ctx context.Context) ([]*pbresource.Resource, error) {
			if err := b.consistent(ctx); err != nil {
				return nil, err
			}
			return b.store.List(typ, tenancy, namePrefix)
		},
		func(ctx context.Context, conn *grpc.ClientConn) ([]*pbresource.Resource, error) {
			if b.sealed(typ) {
				return readIndexed(ctx, b, conn, func() ([]*pbresource.Resource, error) { return b.store.List(typ, tenancy, namePrefix) })
			}
			return b.listRemote(ctx, conn, &pbstorage.ListRequest{Type: typ, Tenancy: tenancy, NamePrefix: namePrefix})
		})
}

// ListByOwner implements storage.Backend from the local store, once this
// server has caught up since its start.
func (b *Backend) ListByOwner(ctx context.Context, id *pbresource.ID) ([]*pbresource.Resource, error) {
	if err := b.awaitCaughtUp(ctx); err != nil {
		return nil, err
	}
	return b.store.ListByOwner(id)
}

// WatchList implements storage.Backend from the local store, on followers
// too. Every server applies the same log at the same indexes, so a watch
// can resume here from an index another server gave it. When this server
// has not applied that index yet, it waits (up to the hold time) until it
// has committed it; the store skips the changes up to it that it applies
// later, so that each change is seen exactly once. An index this
// server never reaches (one no server issued) fails with
// storage.ErrIndexTooOld: re-list.
func (b *Backend) WatchList(ctx context.Context, typ *pbresource.Type, tenancy *pbresource.Tenancy, namePrefix string, sinceIndex uint64) (storage.Watch, error) {
	if err := b.awaitCaughtUp(ctx); err != nil {
		return nil, err
	}
	if sinceIndex > b.store.Index() {
		if err := b.waitCommitted(ctx, sinceIndex); err != nil {
			return nil, err
		}
	}
	return b.store.WatchListWith(typ, tenancy, namePrefix, sinceIndex, storage.WatchOptionsFrom(ctx))
}

// waitCommitted waits until this server has learned that the log entry at
// idx is committed. Raft hands committed entries to the FSM in order, so
// what the store has not applied yet of them arrives later.
func (b *Backend) waitCommitted(ctx context.Context, idx uint64) error {
	if b.IsLeader() && idx > b.raft.LastIndex() {
		return fmt.Errorf("%w (index %d is beyond the leader's log, which ends at %d)", storage.ErrIndexTooOld, idx, b.raft.LastIndex())
	}
	hold := time.NewTimer(b.tuning.HoldTimeout)
	defer hold.Stop()
	switch err := b.pollUntil(func() bool { return b.raft.AppliedIndex() >= idx }, hold.C, ctx.Done()); err {
	case errPollDeadline:
		return fmt.Errorf("%w (index %d is beyond what this server has committed, %d)", storage.ErrIndexTooOld, idx, b.raft.AppliedIndex())
	case errPollDone:
		return fmt.Errorf("%w: %w", storage.ErrUnavailable, ctx.Err())
	default:
		return err
	}
}
