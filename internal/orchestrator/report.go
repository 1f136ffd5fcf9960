package orchestrator

import (
	"maps"

	"google.golang.org/protobuf/proto"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
)

// The fields of a Task an agent owns and reports: last_status, containers,
// health, stop_reason, started_at, stopping_at, stopped_at, session and
// reported_at. Everything else belongs to whoever placed the task.

// IsAgentReport reports whether next is prev changed by nothing but an
// agent's report: the same task (uid) and metadata, the same placement and
// desired status, and a new reported_at (which only a report sets; the
// servers marking a task LOST change the agent's fields without it). The
// agent that wrote such a change has it from its own write, so the servers
// need not stream it back.
func IsAgentReport(prev, next *pbresource.Resource) bool {
	if prev.GetId().GetUid() != next.GetId().GetUid() || !maps.Equal(prev.GetMetadata(), next.GetMetadata()) {
		return false
	}
	p, err := decodeTask(prev)
	if err != nil {
		return false
	}
	n, err := decodeTask(next)
	if err != nil {
		return false
	}
	if n.GetReportedAt() == nil || proto.Equal(p.GetReportedAt(), n.GetReportedAt()) {
		return false
	}
	return proto.Equal(placement(p), placement(n))
}

func decodeTask(res *pbresource.Resource) (*pborch.Task, error) {
	t := &pborch.Task{}
	return t, res.GetData().UnmarshalTo(t)
}

// placement is t without the fields an agent owns.
func placement(t *pborch.Task) *pborch.Task {
	c := proto.Clone(t).(*pborch.Task)
	c.LastStatus, c.Containers, c.Health, c.StopReason = "", nil, "", ""
	c.StartedAt, c.StoppingAt, c.StoppedAt = nil, nil, nil
	c.Session, c.ReportedAt = "", nil
	return c
}
