package orchestrator

import (
	"maps"

	"google.golang.org/protobuf/proto"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
)

// TaskStatusKey is the status key under which a Task carries what its
// agent reports (a TaskStatus). The agent owns it; the servers write it
// only to mark the task LOST with its instance.
const TaskStatusKey = "agent"

// TaskStatusOf is what the agent last reported about a task, from its
// status["agent"]: a task without one (nothing reported yet) is PENDING,
// of unknown health. It never returns nil; the result must not be
// changed (it may be shared by a cache).
func TaskStatusOf(res *pbresource.Resource) *pborch.TaskStatus {
	if st := res.GetStatus()[TaskStatusKey]; st.GetData() != nil {
		ts := &pborch.TaskStatus{}
		if err := st.GetData().UnmarshalTo(ts); err == nil {
			return ts
		}
	}
	return pendingStatus
}

var pendingStatus = &pborch.TaskStatus{LastStatus: StatusPending, Health: HealthUnknown}

// TaskStopReason is why a task stopped, as views show it: what its agent
// (or the servers, marking it LOST) reported, or, before that, why it was
// asked to stop.
func TaskStopReason(t *pborch.Task, st *pborch.TaskStatus) string {
	if r := st.GetStopReason(); r != "" {
		return r
	}
	return t.GetStopReason()
}

// SameReport reports whether stored carries report: equal but for
// reported_at.
func SameReport(stored, report *pborch.TaskStatus) bool {
	s := proto.Clone(stored).(*pborch.TaskStatus)
	s.ReportedAt = report.GetReportedAt()
	return proto.Equal(s, report)
}

// IsAgentReport reports whether next is prev changed by nothing but an
// agent's report: the same task (uid), data and metadata, no other status
// key changed, and status["agent"] written with a new reported_at (which
// only a report sets; the servers marking a task LOST write it without).
// The agent that wrote such a change has it from its own write, so the
// servers need not stream it back.
func IsAgentReport(prev, next *pbresource.Resource) bool {
	if prev.GetId().GetUid() != next.GetId().GetUid() || prev.GetGeneration() != next.GetGeneration() ||
		!maps.Equal(prev.GetMetadata(), next.GetMetadata()) || !proto.Equal(prev.GetData(), next.GetData()) {
		return false
	}
	for k, st := range next.GetStatus() {
		if k != TaskStatusKey && !proto.Equal(st, prev.GetStatus()[k]) {
			return false
		}
	}
	for k := range prev.GetStatus() {
		if _, ok := next.GetStatus()[k]; !ok {
			return false
		}
	}
	ns := next.GetStatus()[TaskStatusKey]
	if ns.GetData() == nil {
		return false
	}
	n := &pborch.TaskStatus{}
	if ns.GetData().UnmarshalTo(n) != nil || n.GetReportedAt() == nil {
		return false
	}
	p := &pborch.TaskStatus{}
	if ps := prev.GetStatus()[TaskStatusKey]; ps.GetData() != nil && ps.GetData().UnmarshalTo(p) != nil {
		return false
	}
	return !proto.Equal(p.GetReportedAt(), n.GetReportedAt())
}
