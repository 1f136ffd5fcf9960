package orchestrator

import (
	"maps"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
)

// MergeReport returns stored with the fields an agent owns replaced by
// report's, and reported_at set: what an agent writes over a stored task.
// It is the one list of those fields (last_status, containers, health,
// stop_reason, started_at, stopping_at, stopped_at, session and
// reported_at); everything else belongs to whoever placed the task.
func MergeReport(stored, report *pborch.Task, reportedAt *timestamppb.Timestamp) *pborch.Task {
	t := proto.Clone(stored).(*pborch.Task)
	t.LastStatus = report.GetLastStatus()
	t.Containers = report.GetContainers()
	t.Health = report.GetHealth()
	t.StopReason = report.GetStopReason()
	t.StartedAt = report.GetStartedAt()
	t.StoppingAt = report.GetStoppingAt()
	t.StoppedAt = report.GetStoppedAt()
	t.Session = report.GetSession()
	t.ReportedAt = reportedAt
	return t
}

// SameReport reports whether stored carries report: the fields an agent
// owns are equal, reported_at aside.
func SameReport(stored, report *pborch.Task) bool {
	return proto.Equal(MergeReport(stored, report, stored.GetReportedAt()), stored)
}

// IsAgentReport reports whether next is prev changed by nothing but an
// agent's report: the same task (uid) and metadata, only the fields an
// agent owns changed, and a new reported_at (which only a report sets; the
// servers marking a task LOST change the agent's fields without it). The
// agent that wrote such a change has it from its own write, so the servers
// need not stream it back. nextTask is next's data, decoded by the caller.
func IsAgentReport(prev, next *pbresource.Resource, nextTask *pborch.Task) bool {
	if prev.GetId().GetUid() != next.GetId().GetUid() || !maps.Equal(prev.GetMetadata(), next.GetMetadata()) {
		return false
	}
	if nextTask.GetReportedAt() == nil {
		return false
	}
	p := &pborch.Task{}
	if err := prev.GetData().UnmarshalTo(p); err != nil {
		return false
	}
	if proto.Equal(p.GetReportedAt(), nextTask.GetReportedAt()) {
		return false
	}
	return proto.Equal(MergeReport(p, nextTask, nextTask.GetReportedAt()), nextTask)
}
