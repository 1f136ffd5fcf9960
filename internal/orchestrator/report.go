package orchestrator

import (
	"maps"

	"google.golang.org/protobuf/proto"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
)

// TaskStatusKey is the status key under which a Task carries what its
// agent reports (a TaskStatus). The agent of the task's instance alone
// writes it (resource.StatusOwner).
const TaskStatusKey = "agent"

// LostStatusKey is the status key under which the servers' task
// controller marks a task lost with its instance (a TaskLost); it alone
// writes it. The key is the controller's name.
const LostStatusKey = "orchestrator-task"

// TaskStatusOf is the task's state as every reader sees it: what the
// agent last reported (status["agent"]), merged with the servers' verdict
// that it was lost (status["orchestrator-task"]) by MergeTaskStatus. A
// task without either is PENDING, of unknown health. It never returns
// nil; the result must not be changed (it may be shared by a cache).
func TaskStatusOf(res *pbresource.Resource) *pborch.TaskStatus {
	return MergeTaskStatus(AgentStatusOf(res), taskLostOf(res))
}

// AgentStatusOf is what the agent last reported about a task, its
// status["agent"] alone; nil when it reported nothing (or nothing that
// decodes).
func AgentStatusOf(res *pbresource.Resource) *pborch.TaskStatus {
	if st := res.GetStatus()[TaskStatusKey]; st.GetData() != nil {
		ts := &pborch.TaskStatus{}
		if err := st.GetData().UnmarshalTo(ts); err == nil {
			return ts
		}
	}
	return nil
}

func taskLostOf(res *pbresource.Resource) *pborch.TaskLost {
	if st := res.GetStatus()[LostStatusKey]; st.GetData() != nil {
		l := &pborch.TaskLost{}
		if err := st.GetData().UnmarshalTo(l); err == nil {
			return l
		}
	}
	return nil
}

// MergeTaskStatus is the one view of a task's state, from the agent's
// report (nil: none yet) and the servers' lost verdict (nil: none). The
// verdict holds over the report it was made over (the one whose
// reported_at it names; no report at all when it names none) and over no
// later one: then the task is LOST, with the verdict's reason and time,
// and the rest of what the agent last said (containers, health, network)
// as it was. Otherwise the agent's report is the state, or PENDING when
// there is none. It is pure; the result must not be changed.
func MergeTaskStatus(agent *pborch.TaskStatus, lost *pborch.TaskLost) *pborch.TaskStatus {
	if agent == nil {
		agent = pendingStatus
	}
	if lost == nil || !proto.Equal(lost.GetReportedAt(), agent.GetReportedAt()) {
		return agent
	}
	out := proto.Clone(agent).(*pborch.TaskStatus)
	out.LastStatus = StatusLost
	out.StopReason = lost.GetReason()
	out.StoppedAt = lost.GetLostAt()
	return out
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
// key changed (the servers' lost verdict is another key), and
// status["agent"] written with a new reported_at.
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
