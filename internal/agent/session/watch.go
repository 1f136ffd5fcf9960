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
// this instance's tasks, or, once the agent holds a whole view, with only
// what differs from it. OutOfRange (the stream fell behind, or the server
// lists its tasks again) means open it again.
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
			s.held.forget()
			continue
		}
		return fmt.Errorf("task watch: %w", err)
	}
}

// watchOnce runs one task stream until it fails. The server shows no
// view older than min_index (the newest the agent has taken in): it waits
// to catch up, or refuses (Unavailable: it is behind, the agent moves to
// another; DataLoss: the cluster lost its state). The agent resumes from
// what it holds, as of that index: the server sends only what differs.
func (c *conn) watchOnce(ctx context.Context) error {
	s := c.s
	// Everything held is at or below the view index, but for a report
	// stored after it was read: a difference that brings an older version
	// of that task is not taken (held.take keeps the newer).
	stream, err := c.hb.WatchTasks(ctx, &pbagent.WatchTasksRequest{Instance: s.cfg.Name, WithDefinitions: true, MinIndex: s.viewIndex.Load(), Resume: s.held.resume()})
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
// stream fails. The stream starts with a listing of the instance's
// tasks, whole or (resumed: its END_OF_SNAPSHOT says so) only what
// differs from what the agent holds; either is handed over as one whole
// listing once it has ended (a start cut short is never acted on: the
// next stream starts again from what the agent held), and the tasks the
// manager knows that it does not show were deleted meanwhile.
func (s *Session) consume(stream eventStream) error {
	inSnapshot := true
	var start []*pbresource.WatchEvent
	for {
		ev, err := stream.Recv()
		if err != nil {
			return err
		}
		switch {
		case isDefinition(ev):
			// Carried ahead of the first task that uses it: no event of a
			// task, and no index of its own.
			s.held.learnDefinition(ev.GetResource())
			s.tasks.LearnDefinition(ev.GetResource())
			continue
		case inSnapshot && ev.GetIndex() < s.viewIndex.Load():
			// Never taken in, even from a server that failed to honour
			// min_index: it would undo what the agent has seen.
			return fmt.Errorf("%w: the server's listing is as of index %d, older than index %d already seen", errStaleView, ev.GetIndex(), s.viewIndex.Load())
		case inSnapshot && ev.GetOp() != pbresource.WatchEvent_OP_END_OF_SNAPSHOT:
			start = append(start, ev)
		case ev.GetOp() == pbresource.WatchEvent_OP_UPSERT:
			s.observe(ev.GetResource(), false)
		case ev.GetOp() == pbresource.WatchEvent_OP_DELETE:
			s.observe(ev.GetResource(), true)
		case ev.GetOp() == pbresource.WatchEvent_OP_END_OF_SNAPSHOT && inSnapshot:
			listing, err := s.startListing(start, ev.GetResumed())
			if err != nil {
				return err
			}
			s.tasks.ObserveListing(listing)
			start, inSnapshot = nil, false
		}
		s.sawIndex(ev.GetIndex())
	}
}

// startListing is what a stream's start (its events before
// END_OF_SNAPSHOT) leaves the agent holding, and takes it in as held: a
// whole snapshot's tasks, or, resumed, what the agent held with the
// start's changes applied. The two are the same listing; the resumed one
// cost the server and the stream only the changes.
func (s *Session) startListing(start []*pbresource.WatchEvent, resumed bool) ([]*pbresource.Resource, error) {
	if resumed {
		if !s.held.isWhole() {
			// The agent holds no whole view, so it asked for none: a
			// difference from it cannot be taken in.
			return nil, errUnaskedResume
		}
		return s.held.resumed(start), nil
	}
	listing := make([]*pbresource.Resource, 0, len(start))
	for _, ev := range start {
		if ev.GetOp() == pbresource.WatchEvent_OP_UPSERT {
			listing = append(listing, ev.GetResource())
		}
	}
	s.held.replace(listing)
	return listing, nil
}

// observe hands the task manager one change the servers showed, and
// holds it.
func (s *Session) observe(res *pbresource.Resource, deleted bool) {
	s.held.observe(res, deleted)
	s.tasks.Observe(res, deleted)
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

// errUnaskedResume ends a task stream that says it resumed when the agent
// did not ask it to: the agent moves to another server.
var errUnaskedResume = status.Error(codes.Unavailable, "the task stream resumed from a view the agent did not send")

// isDefinition: ev carries a task definition (WatchTasksRequest.
// with_definitions), not a task.
func isDefinition(ev *pbresource.WatchEvent) bool {
	return ev.GetOp() == pbresource.WatchEvent_OP_UPSERT &&
		ids.SameType(ev.GetResource().GetId().GetType(), orchestrator.TaskDefinitionType)
}
