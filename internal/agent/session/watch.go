package session

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
func (c *conn) watchLoop(ctx context.Context) error {
	s := c.s
	for {
		err := c.watchOnce(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if resource.NeedsRelist(err) {
			s.log.Info("task watch must list again", "server", c.addr, "reason", err)
			continue
		}
		if status.Code(err) == codes.DataLoss {
			// The cluster never committed what this agent saw: its
			// servers lost their state. Their view is all there is.
			s.log.Error("the servers' state is older than what this agent has seen; taking their view", "server", c.addr, "seen_index", s.viewIndex.Load(), "reason", status.Convert(err).Message())
			s.viewIndex.Store(0)
			continue
		}
		return fmt.Errorf("task watch: %w", err)
	}
}

// watchOnce runs one task stream until it fails. The server shows no
// view older than min_index (the newest the agent has taken in): it waits
// to catch up, or refuses (Unavailable: it is behind, the agent moves to
// another; DataLoss: the cluster lost its state).
func (c *conn) watchOnce(ctx context.Context) error {
	s := c.s
	stream, err := c.hb.WatchTasks(ctx, &pbagent.WatchTasksRequest{Instance: s.cfg.Name, WithDefinitions: true, MinIndex: s.viewIndex.Load()})
	if err != nil {
		return err
	}
	return s.consume(stream)
}

// eventStream is what consume reads: a WatchTasks stream (or, in tests, a
// scripted one).
type eventStream interface {
	Recv() (*pbresource.WatchEvent, error)
}

// consume hands a task stream's events to the task manager until the
// stream fails. The stream starts with a full listing of the instance's
// tasks, handed over whole once it has ended (a listing cut short is
// never acted on: the next stream lists again); the tasks the manager
// knows that it does not show were deleted meanwhile.
func (s *Session) consume(stream eventStream) error {
	inSnapshot := true
	var listing []*pbresource.Resource
	for {
		ev, err := stream.Recv()
		if err != nil {
			return err
		}
		switch {
		case isDefinition(ev):
			// Carried ahead of the first task that uses it: no event of a
			// task, and no index of its own.
			s.tasks.LearnDefinition(ev.GetResource())
			continue
		case inSnapshot && ev.GetIndex() < s.viewIndex.Load():
			// Never taken in, even from a server that failed to honour
			// min_index: it would undo what the agent has seen.
			return fmt.Errorf("%w: the server's listing is as of index %d, older than index %d already seen", errStaleView, ev.GetIndex(), s.viewIndex.Load())
		case ev.GetOp() == pbresource.WatchEvent_OP_UPSERT && inSnapshot:
			listing = append(listing, ev.GetResource())
		case ev.GetOp() == pbresource.WatchEvent_OP_UPSERT:
			s.tasks.Observe(ev.GetResource(), false)
		case ev.GetOp() == pbresource.WatchEvent_OP_DELETE:
			s.tasks.Observe(ev.GetResource(), true)
		case ev.GetOp() == pbresource.WatchEvent_OP_END_OF_SNAPSHOT:
			if inSnapshot {
				s.tasks.ObserveListing(listing)
				listing = nil
			}
			inSnapshot = false
		}
		s.sawIndex(ev.GetIndex())
	}
}

// sawIndex records that the agent's view of its tasks is as of idx at
// least.
func (s *Session) sawIndex(idx uint64) {
	for {
		cur := s.viewIndex.Load()
		if idx <= cur || s.viewIndex.CompareAndSwap(cur, idx) {
			return
		}
	}
}

// sawVersion records a stored resource's version (its index) as seen.
func (s *Session) sawVersion(res *pbresource.Resource) {
	if v, err := strconv.ParseUint(res.GetVersion(), 10, 64); err == nil {
		s.sawIndex(v)
	}
}

// errStaleView ends a task stream whose listing is older than a view the
// agent has already taken in: the connection ends, and the agent moves to
// another server.
var errStaleView = status.Error(codes.Unavailable, "stale task listing")

// isDefinition: ev carries a task definition (WatchTasksRequest.
// with_definitions), not a task.
func isDefinition(ev *pbresource.WatchEvent) bool {
	return ev.GetOp() == pbresource.WatchEvent_OP_UPSERT &&
		ids.SameType(ev.GetResource().GetId().GetType(), orchestrator.TaskDefinitionType)
}
