package agent

import (
	"context"
	"fmt"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage"
)

// watchLoop learns the tasks placed on this instance by watching every
// task (there is no server-side filter on data.instance) and keeping those
// that are this instance's. It resumes from the last index it has fully
// seen, on this server or the next one, and lists again when the server
// answers OutOfRange (it fell behind, or no longer keeps that index).
func (s *session) watchLoop(ctx context.Context) error {
	a := s.a
	for {
		err := s.watchOnce(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if resource.NeedsRelist(err) {
			a.log.Info("task watch must list again", "server", s.addr, "reason", err)
			a.watchIndex = 0
			continue
		}
		return fmt.Errorf("task watch: %w", err)
	}
}

// watchOnce runs one WatchList stream until it fails.
func (s *session) watchOnce(ctx context.Context) error {
	a := s.a
	since := a.watchIndex
	stream, err := s.res.WatchList(ctx, &pbresource.WatchListRequest{
		Type:       orchestrator.TaskType,
		Tenancy:    &pbresource.Tenancy{Namespace: storage.WildcardNamespace},
		SinceIndex: since,
	})
	if err != nil {
		return err
	}
	// A fresh listing shows every task; those the agent knows that it does
	// not show were deleted meanwhile.
	fresh := since == 0
	var seen map[string]bool
	if fresh {
		seen = make(map[string]bool)
	}
	inSnapshot := true
	for {
		ev, err := stream.Recv()
		if err != nil {
			return err
		}
		switch ev.GetOp() {
		case pbresource.WatchEvent_OP_UPSERT:
			if fresh && inSnapshot {
				seen[ev.GetResource().GetId().GetUid()] = true
			}
			a.observe(ctx, s, ev.GetResource(), false)
		case pbresource.WatchEvent_OP_DELETE:
			a.observe(ctx, s, ev.GetResource(), true)
		case pbresource.WatchEvent_OP_END_OF_SNAPSHOT:
			if fresh && inSnapshot {
				a.sweep(ctx, s, seen)
			}
			inSnapshot = false
		}
		a.watchIndex = nextWatchIndex(a.watchIndex, ev, fresh && inSnapshot)
	}
}

// nextWatchIndex is the index to resume from after ev: the highest index
// all of whose events have been seen. Several events of one batch share an
// index, so an event at index i only proves that everything below i was
// seen (resuming from i-1 may repeat some events of i, which is harmless:
// they are upserts of the same versions). END_OF_SNAPSHOT proves its own
// index. While a fresh listing is under way nothing is proven: a stream
// cut in the middle of it must list again.
func nextWatchIndex(cur uint64, ev *pbresource.WatchEvent, listing bool) uint64 {
	idx := ev.GetIndex()
	switch {
	case ev.GetOp() == pbresource.WatchEvent_OP_END_OF_SNAPSHOT:
		return max(cur, idx)
	case listing || idx == 0:
		return cur
	}
	return max(cur, idx-1)
}
