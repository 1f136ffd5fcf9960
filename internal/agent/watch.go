package agent

import (
	"context"
	"fmt"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbagent "trellis.dev/trellis/api/agent/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
)

// watchLoop learns the tasks placed on this instance by watching them:
// through the server's per-instance task stream (WatchTasks), which starts
// with a snapshot of this instance's tasks every time; or, from a server
// without it, by watching every task and keeping this instance's, resuming
// from the last index it has fully seen. Either way OutOfRange (it fell
// behind, or the server no longer keeps that index) means open it again
// with a fresh listing.
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
		if status.Code(err) == codes.DataLoss {
			// The cluster never committed what this agent saw: its
			// servers lost their state. Their view is all there is.
			a.log.Error("the servers' state is older than what this agent has seen; taking their view", "server", s.addr, "seen_index", a.viewIndex.Load(), "reason", status.Convert(err).Message())
			a.viewIndex.Store(0)
			a.watchIndex = 0
			continue
		}
		return fmt.Errorf("task watch: %w", err)
	}
}

// eventStream is what watchOnce reads: a WatchTasks or a WatchList stream.
type eventStream interface {
	Recv() (*pbresource.WatchEvent, error)
}

// openTaskStream opens the server's per-instance task stream
// (AgentService.WatchTasks, always a fresh snapshot) or, from a server
// that has none, a WatchList of every task that resumes from the last
// index seen. fresh says the stream starts with a full listing.
func (s *session) openTaskStream(ctx context.Context) (stream eventStream, first *pbresource.WatchEvent, fresh bool, err error) {
	a := s.a
	if !s.noWatchTasks {
		ts, err := s.hb.WatchTasks(ctx, &pbagent.WatchTasksRequest{Instance: a.cfg.Name, WithDefinitions: true, MinIndex: a.viewIndex.Load()})
		if err != nil {
			return nil, nil, false, err
		}
		// A server without WatchTasks answers the first read.
		ev, err := ts.Recv()
		if status.Code(err) != codes.Unimplemented {
			return ts, ev, true, err
		}
		s.noWatchTasks = true
		a.log.Info("the server has no per-instance task stream; watching every task", "server", s.addr)
	}
	since := a.watchIndex
	ws, err := s.res.WatchList(ctx, &pbresource.WatchListRequest{
		Type:       orchestrator.TaskType,
		Tenancy:    &pbresource.Tenancy{Namespace: ids.WildcardNamespace},
		SinceIndex: since,
	})
	return ws, nil, since == 0, err
}

// watchOnce runs one task stream until it fails.
func (s *session) watchOnce(ctx context.Context) error {
	stream, first, fresh, err := s.openTaskStream(ctx)
	if err != nil {
		return err
	}
	return s.consume(ctx, stream, first, fresh)
}

// consume acts on a task stream's events (first, when not nil, is the
// one already read) until it fails. fresh: it starts with a full listing.
func (s *session) consume(ctx context.Context, stream eventStream, first *pbresource.WatchEvent, fresh bool) error {
	a := s.a
	if fresh {
		a.watchIndex = 0
	}
	// A fresh listing shows every task; those the agent knows that it does
	// not show were deleted meanwhile.
	var seen map[string]bool
	if fresh {
		seen = make(map[string]bool)
	}
	inSnapshot := true
	// A fresh listing's tasks are taken in together, at its end.
	var listing []listedTask
	for {
		ev := first
		first = nil
		if ev == nil {
			var err error
			if ev, err = stream.Recv(); err != nil {
				return err
			}
		}
		switch {
		case isDefinition(ev):
			// Carried ahead of the first task that uses it: no event of a
			// task, and no index of its own.
			a.learnDefinition(ev.GetResource())
			continue
		case fresh && inSnapshot && ev.GetIndex() < a.viewIndex.Load():
			// A server that does not honour min_index, showing the past.
			return fmt.Errorf("%w: the server's listing is as of index %d, older than index %d already seen", errStaleView, ev.GetIndex(), a.viewIndex.Load())
		case ev.GetOp() == pbresource.WatchEvent_OP_UPSERT && fresh && inSnapshot:
			seen[ev.GetResource().GetId().GetUid()] = true
			if l, ok := a.listed(ev.GetResource()); ok {
				listing = append(listing, l)
			}
		case ev.GetOp() == pbresource.WatchEvent_OP_UPSERT:
			a.observe(ctx, s, ev.GetResource(), false)
		case ev.GetOp() == pbresource.WatchEvent_OP_DELETE:
			a.observe(ctx, s, ev.GetResource(), true)
		case ev.GetOp() == pbresource.WatchEvent_OP_END_OF_SNAPSHOT:
			if fresh && inSnapshot {
				a.observeListing(ctx, s, listing)
				listing = nil
				a.sweep(ctx, s, seen)
			}
			inSnapshot = false
		}
		a.watchIndex = nextWatchIndex(a.watchIndex, ev, fresh && inSnapshot)
		a.sawIndex(ev.GetIndex())
	}
}

// sawIndex records that the agent's view of its tasks is as of idx at
// least.
func (a *Agent) sawIndex(idx uint64) {
	for {
		cur := a.viewIndex.Load()
		if idx <= cur || a.viewIndex.CompareAndSwap(cur, idx) {
			return
		}
	}
}

// sawVersion records a stored resource's version (its index) as seen.
func (a *Agent) sawVersion(res *pbresource.Resource) {
	if v, err := strconv.ParseUint(res.GetVersion(), 10, 64); err == nil {
		a.sawIndex(v)
	}
}

// errStaleView ends a task stream whose listing is older than a view the
// agent has already taken in: the session ends, and the agent moves to
// another server.
var errStaleView = status.Error(codes.Unavailable, "stale task listing")

// isDefinition: ev carries a task definition (WatchTasksRequest.
// with_definitions), not a task.
func isDefinition(ev *pbresource.WatchEvent) bool {
	return ev.GetOp() == pbresource.WatchEvent_OP_UPSERT &&
		ids.SameType(ev.GetResource().GetId().GetType(), orchestrator.TaskDefinitionType)
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
