package assignments

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbagent "trellis.dev/trellis/api/agent/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/resource"
)

// WatchTasks serves AgentService.WatchTasks from the hub: the instance's
// tasks (or, resumed, only what differs from what the agent holds),
// END_OF_SNAPSHOT, then their changes; with with_definitions, each task
// definition they use before the first of its tasks, but for those the
// agent holds. The snapshot is never older than min_index (see
// fanout.Fanout.Subscribe).
func (h *Hub) WatchTasks(req *pbagent.WatchTasksRequest, stream pbagent.AgentService_WatchTasksServer) error {
	if err := resource.ValidateName("instance", req.GetInstance()); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	resume, err := resumptionOf(req)
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	ctx := stream.Context()
	snap, index, sub, err := h.Subscribe(ctx, req.GetInstance(), req.GetMinIndex())
	if err != nil {
		return err
	}
	defer sub.Close()
	var defs *definitionCarrier
	if req.GetWithDefinitions() {
		var held map[defKey]bool
		if resume != nil {
			held = resume.definitions
		}
		defs = newDefinitionCarrier(h, held)
	}
	sent := 0
	send := func(ev *pbresource.WatchEvent) error {
		if defs != nil {
			if def := defs.before(ctx, ev); def != nil {
				if err := stream.Send(def); err != nil {
					return err
				}
				sent++
			}
		}
		sent++
		return stream.Send(ev)
	}
	start := streamStart(snap, index, resume)
	for _, ev := range start {
		if err := send(ev); err != nil {
			return err
		}
	}
	h.metrics.started(resume != nil, sent, savedBy(snap, start, resume, defs != nil))
	if err := stream.Send(&pbresource.WatchEvent{Op: pbresource.WatchEvent_OP_END_OF_SNAPSHOT, Index: index, Resumed: resume != nil}); err != nil {
		return err
	}
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return status.FromContextError(ctx.Err()).Err()
			}
			return err
		}
		if err := send(ev); err != nil {
			return err
		}
	}
}
