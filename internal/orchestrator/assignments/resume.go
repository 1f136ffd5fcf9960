package assignments

import (
	"fmt"

	pbagent "trellis.dev/trellis/api/agent/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/fanout"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
)

// A reconnecting agent resumes its task stream from what it holds
// (WatchTasksRequest.resume) instead of taking a whole snapshot, and every
// task definition, again: at 5,000 instances, agents that fell behind or
// lost their server each took both, which made more of them fall behind.
// The stream starts with the difference between what the agent holds and
// the fan-out's snapshot of its instance (fanout.Difference), which brings
// it to that snapshot exactly; then END_OF_SNAPSHOT marked resumed.

// resumption is what a resumed stream starts from: the tasks the agent
// holds, and the definitions it holds.
type resumption struct {
	tasks       []fanout.Held
	definitions map[defKey]bool
}

// resumptionOf reads a request's resume; nil when it has none (a whole
// snapshot). A FieldError names the entry at fault.
func resumptionOf(req *pbagent.WatchTasksRequest) (*resumption, error) {
	in := req.GetResume()
	if in == nil {
		return nil, nil
	}
	if n := len(in.GetTasks()); n > orchestrator.MaxHeldEntries {
		return nil, resource.NewFieldError("resume.tasks", "%d tasks, more than the %d a resume may hold: leave resume unset for a whole snapshot", n, orchestrator.MaxHeldEntries)
	}
	if n := len(in.GetDefinitions()); n > orchestrator.MaxHeldEntries {
		return nil, resource.NewFieldError("resume.definitions", "%d definitions, more than the %d a resume may hold: send fewer", n, orchestrator.MaxHeldEntries)
	}
	r := &resumption{tasks: make([]fanout.Held, 0, len(in.GetTasks())), definitions: make(map[defKey]bool, len(in.GetDefinitions()))}
	for i, t := range in.GetTasks() {
		id := t.GetId()
		switch {
		case id.GetName() == "":
			return nil, resource.NewFieldError(fmt.Sprintf("resume.tasks[%d].id.name", i), "is required")
		case id.GetUid() == "":
			return nil, resource.NewFieldError(fmt.Sprintf("resume.tasks[%d].id.uid", i), "is required: a task is held by uid")
		}
		// The type is the hub's to set: a DELETE sent back names a Task.
		r.tasks = append(r.tasks, fanout.Held{ID: &pbresource.ID{
			Type: orchestrator.TaskType, Tenancy: &pbresource.Tenancy{Namespace: id.GetTenancy().GetNamespace()},
			Name: id.GetName(), Uid: id.GetUid(),
		}, Version: t.GetVersion()})
	}
	for i, d := range in.GetDefinitions() {
		if d.GetName() == "" {
			return nil, resource.NewFieldError(fmt.Sprintf("resume.definitions[%d].name", i), "is required")
		}
		r.definitions[defKey{d.GetTenancy().GetNamespace(), d.GetName()}] = true
	}
	return r, nil
}

// streamStart is what a stream sends before its END_OF_SNAPSHOT, as of
// snap (the instance's tasks at index): every task when r is nil,
// otherwise only what differs from what r holds (fanout.Difference).
func streamStart(snap []*pbresource.Resource, index uint64, r *resumption) []*pbresource.WatchEvent {
	if r == nil {
		events := make([]*pbresource.WatchEvent, 0, len(snap))
		for _, res := range snap {
			events = append(events, &pbresource.WatchEvent{Op: pbresource.WatchEvent_OP_UPSERT, Resource: res, Index: index})
		}
		return events
	}
	return fanout.Difference(snap, r.tasks, index)
}

// savedBy counts what a resumed start of snap did not send that a whole
// snapshot would have: the tasks the agent held at their version (the
// snapshot's tasks less the upserts sent), and, on a stream carrying
// definitions, each definition of snap's tasks that the agent held.
func savedBy(snap []*pbresource.Resource, start []*pbresource.WatchEvent, r *resumption, withDefinitions bool) int {
	if r == nil {
		return 0
	}
	upserts := 0
	for _, ev := range start {
		if ev.GetOp() == pbresource.WatchEvent_OP_UPSERT {
			upserts++
		}
	}
	saved := len(snap) - upserts
	if withDefinitions {
		seen := make(map[defKey]bool)
		for _, res := range snap {
			if k, ok := definitionOf(res); ok && !seen[k] {
				seen[k] = true
				if r.definitions[k] {
					saved++
				}
			}
		}
	}
	return saved
}
