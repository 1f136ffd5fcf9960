package resource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/backoff"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/storage"
)

// Follower takes what Follow sees of one type, on Follow's goroutine, in
// the store's order.
type Follower interface {
	// Listed replaces what the follower holds with a whole listing of
	// the type, taken at index idx: what it holds and the listing lacks
	// was deleted meanwhile.
	Listed(list []*pbresource.Resource, idx uint64)
	// Upserted and Deleted are one change, at index idx. A resumed watch
	// repeats the changes of the index it resumed at that the follower
	// had seen part of: it recognises them by version.
	Upserted(res *pbresource.Resource, idx uint64)
	Deleted(res *pbresource.Resource, idx uint64)
	// Progressed says that every change up to complete has been handed
	// over (after a listing, an event that proves it, or a progress mark).
	Progressed(complete uint64)
}

// FollowConfig says what Follow follows.
type FollowConfig struct {
	Source Watcher
	Type   *pbresource.Type // followed in every namespace
	// Context, when set, dresses the context each watch is opened with
	// (storage.WithWatchBuffer, storage.WithProgressMarks,
	// FromOperations).
	Context func(context.Context) context.Context
	// Retry paces the watches opened again after a failure that made no
	// progress; Rand draws its jitter (nil: the full Ceiling).
	Retry backoff.Policy
	Rand  func() float64
	// Restarted, when set, is told each time a watch that ended is
	// opened again: "resume" (after the index wholly seen) or "relist".
	Restarted func(how string)
	Logger    *slog.Logger // discards when nil
}

// Follow follows one type until ctx ends: a whole listing (Listed), then
// every change. A watch that ends is opened again after the last index
// whose changes it has wholly handed over (an event at index i proves every
// change before i; an END_OF_SNAPSHOT, or a progress mark, every change up
// to its index), so that no change is lost; only when the source can no
// longer resume from there (NeedsRelist) does it list again. A listing
// older than what it has handed over (from a server that lags) is refused
// (ErrStaleListing): Follow resumes from what it holds, and lists again,
// until a server has caught up; a follower never steps back in time (after
// a cluster lost its state, only a new Follow takes the older view).
// Failures that made no progress are paced by cfg.Retry. The controller
// runtime's informers and package informer's follow their types with it.
func Follow(ctx context.Context, cfg FollowConfig, f Follower) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("type", ids.TypeString(cfg.Type))
	wait := backoff.Waiter{Policy: cfg.Retry, Rand: cfg.Rand}
	restarted := func(how string) {
		if cfg.Restarted != nil {
			cfg.Restarted(how)
		}
	}
	var (
		complete uint64 // every change up to it has been handed over
		// handed is the highest complete ever reached: kept across
		// listings, since no listing may take the follower back before it.
		handed uint64
	)
	for ctx.Err() == nil {
		wctx := ctx
		if cfg.Context != nil {
			wctx = cfg.Context(ctx)
		}
		w, err := cfg.Source.Watch(wctx, &pbresource.WatchListRequest{
			Type:       cfg.Type,
			Tenancy:    &pbresource.Tenancy{Namespace: ids.WildcardNamespace},
			SinceIndex: complete,
		})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if complete > 0 && NeedsRelist(err) {
				log.Info("watch cannot resume, listing again", "after_index", complete, "err", err)
				restarted("relist")
				complete = 0
				continue
			}
			d := wait.Next()
			log.Warn("watch failed to open", "after_index", complete, "err", err, "failures", wait.Failures(), "retry_in", d)
			if !sleepCtx(ctx, d) {
				return
			}
			continue
		}
		before := complete
		complete, err = followOne(ctx, w, complete, handed, f)
		w.Close()
		if ctx.Err() != nil {
			return
		}
		progressed := complete > before
		if errors.Is(err, ErrStaleListing) {
			// A server behind what the follower holds (a lagging one the
			// link moved to): nothing was taken. Resume from what it
			// holds, after a pause: a server still behind waits to catch
			// up before it answers (or refuses, and it lists again).
			complete, progressed = handed, false
		}
		handed = max(handed, complete)
		restarted("resume")
		if progressed {
			wait.Reset()
			log.Info("watch ended, resuming", "after_index", complete, "err", err)
			continue
		}
		d := wait.Next()
		log.Warn("watch ended without progress", "after_index", complete, "err", err, "failures", wait.Failures(), "retry_in", d)
		if !sleepCtx(ctx, d) {
			return
		}
	}
}

// sleepCtx waits d, false when ctx ends first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// ErrStaleListing ends a watch whose listing is as of an index older than
// what its follower has already been handed: taking it in would step the
// follower back in time (the deletions and changes after that index
// undone), so Follow refuses it and tries again.
var ErrStaleListing = errors.New("stale listing")

// followOne hands w's events to f until w fails, and returns the index
// up to which every change has been handed over. since is the index w was
// opened after (0: w starts with a whole listing); a listing older than
// floor is refused (ErrStaleListing) without handing any of it over.
func followOne(ctx context.Context, w storage.Watch, since, floor uint64, f Follower) (uint64, error) {
	var (
		complete = since
		lastSeen = since
		listing  = since == 0
		fresh    []*pbresource.Resource
	)
	for {
		ev, err := w.Next(ctx)
		if err != nil {
			return complete, err
		}
		idx := ev.GetIndex()
		switch ev.GetOp() {
		case pbresource.WatchEvent_OP_END_OF_SNAPSHOT:
			if listing && idx < floor {
				return complete, fmt.Errorf("%w: the listing is as of index %d, older than index %d already handed over", ErrStaleListing, idx, floor)
			}
			if listing {
				f.Listed(fresh, idx)
				listing, fresh = false, nil
			}
			lastSeen = max(lastSeen, idx)
			complete = lastSeen
			f.Progressed(complete)
			continue
		case pbresource.WatchEvent_OP_UPSERT, pbresource.WatchEvent_OP_DELETE:
		default:
			continue
		}
		if listing {
			if ev.GetOp() == pbresource.WatchEvent_OP_UPSERT {
				fresh = append(fresh, ev.GetResource())
			}
			continue
		}
		if idx > lastSeen {
			// The store hands changes over in index order: an event at idx
			// proves every change before it. Events of one batch share an
			// index, so idx itself is complete only once a later index (or
			// a mark) comes.
			lastSeen = idx
			complete = max(complete, idx-1)
		}
		if ev.GetOp() == pbresource.WatchEvent_OP_UPSERT {
			f.Upserted(ev.GetResource(), idx)
		} else {
			f.Deleted(ev.GetResource(), idx)
		}
		f.Progressed(complete)
	}
}
