package informer

import (
	"context"
	"fmt"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
)

// WaitIndex waits until typ has been listed whole and every change of it
// up to idx has been applied: a read after it sees every write at or below
// idx (the caller's own, whose version is its index, or one another server
// acknowledged). It fails with ctx's error, wrapped with how far the type
// had got, when ctx ends first; a caller bounds the wait with ctx (a
// blocking query's ?wait, capped).
func (in *Informer) WaitIndex(ctx context.Context, typ *pbresource.Type, idx uint64) error {
	ts, err := in.state(typ)
	if err != nil {
		return err
	}
	for {
		p, moved := ts.watchProgress()
		if p.synced && p.complete >= idx {
			return nil
		}
		select {
		case <-moved:
		case <-ctx.Done():
			return fmt.Errorf("informer: %s has applied up to index %d (synced: %t), not %d: %w", ids.TypeString(typ), p.complete, p.synced, idx, ctx.Err())
		}
	}
}

// WaitConsistent waits until typ holds every write the cluster
// acknowledged before the call (Consul's ?consistent): it asks for the
// cluster's read index (Config.ReadIndex; this store's own index when
// there is none) and waits for it (WaitIndex). It returns that index.
func (in *Informer) WaitConsistent(ctx context.Context, typ *pbresource.Type) (uint64, error) {
	var idx uint64
	switch {
	case in.cfg.ReadIndex != nil:
		var err error
		if idx, err = in.cfg.ReadIndex(ctx); err != nil {
			return 0, fmt.Errorf("informer: the cluster's read index: %w", err)
		}
	case in.cfg.LocalIndex != nil:
		idx = in.cfg.LocalIndex()
	}
	return idx, in.WaitIndex(ctx, typ, idx)
}

// WaitChange waits, as a blocking query does, until typ has been listed
// whole and has changed after index after (LastChange > after), and
// returns LastChange. When ctx ends first it returns LastChange and ctx's
// error: a blocking query then answers with what it has.
func (in *Informer) WaitChange(ctx context.Context, typ *pbresource.Type, after uint64) (uint64, error) {
	ts, err := in.state(typ)
	if err != nil {
		return 0, err
	}
	for {
		p, moved := ts.watchProgress()
		if p.synced && p.lastChange > after {
			return p.lastChange, nil
		}
		select {
		case <-moved:
		case <-ctx.Done():
			return p.lastChange, ctx.Err()
		}
	}
}
