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

// watchLoop learns the tasks placed on this instance through the server's
// per-instance task stream (WatchTasks), which starts with a snapshot of
// this instance's tasks every time. OutOfRange (the stream fell behind, or
// the server lists its tasks again) means open it again.
func (s *session) watchLoop(ctx context.Context) error {
	a := s.a
	for {
		err := s.watchOnce(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if resource.NeedsRelist(err) {
			a.log.Info("task watch must list again", "server", s.addr, "reason", err)
			continue
		}
		if status.Code(err) == codes.DataLoss {
			// The cluster never committed what this agent saw: its
			// servers lost their state. Their view is all there is.
			a.log.Error("the servers' state is older than what this agent has seen; taking their view", "server", s.addr, "seen_index", a.viewIndex.Load(), "reason", status.Convert(err).Message())
			a.viewIndex.Store(0)
			continue
		}
		return fmt.Errorf("task watch: %w", err)
	}
}

// watchOnce runs one task stream until it fails. The server shows no
// view older than min_index (the newest the agent has taken in): it waits
// to catch up, or refuses (Unavailable: it is behind, the agent moves to
// another; DataLoss: the cluster lost its state).
func (s *session) watchOnce(ctx context.Context) error {
	a := s.a
	stream, err := s.hb.WatchTasks(ctx, &pbagent.WatchTasksRequest{Instance: a.cfg.Name, WithDefinitions: true, MinIndex: a.viewIndex.Load()})
	if err != nil {
		return err
	}
	return s.consume(ctx, stream)
}

// eventStream is what consume reads: a WatchTasks stream (or, in tests, a
// scripted one).
type eventStream interface {
	Recv() (*pbresource.WatchEvent, error)
}

// consume acts on a task stream's events until it fails. The stream
// starts with a full listing of the instance's tasks: those the agent
// knows that it does not show were deleted meanwhile.
func (s *session) consume(ctx context.Context, stream eventStream) error {
	a := s.a
	seen := make(map[string]bool)
	inSnapshot := true
	// The listing's tasks are taken in together, at its end.
	var listing []listedTask
	for {
		ev, err := stream.Recv()
		if err != nil {
			return err
		}
		switch {
		case isDefinition(ev):
			// Carried ahead of the first task that uses it: no event of a
			// task, and no index of its own.
			a.learnDefinition(ev.GetResource())
			continue
		case inSnapshot && ev.GetIndex() < a.viewIndex.Load():
			// Never taken in, even from a server that failed to honour
			// min_index: it would undo what the agent has seen.
			return fmt.Errorf("%w: the server's listing is as of index %d, older than index %d already seen", errStaleView, ev.GetIndex(), a.viewIndex.Load())
		case ev.GetOp() == pbresource.WatchEvent_OP_UPSERT && inSnapshot:
			seen[ev.GetResource().GetId().GetUid()] = true
			if l, ok := a.listed(ev.GetResource()); ok {
				listing = append(listing, l)
			}
		case ev.GetOp() == pbresource.WatchEvent_OP_UPSERT:
			a.observe(ctx, s, ev.GetResource(), false)
		case ev.GetOp() == pbresource.WatchEvent_OP_DELETE:
			a.observe(ctx, s, ev.GetResource(), true)
		case ev.GetOp() == pbresource.WatchEvent_OP_END_OF_SNAPSHOT:
			if inSnapshot {
				a.observeListing(ctx, s, listing)
				listing = nil
				a.sweep(ctx, s, seen)
			}
			inSnapshot = false
		}
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
