package agent

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/orchestrator"
)

// The agent's side of a task: which fields of a Task it writes. Everything
// else (task_definition, instance, started_by, desired_status, created_at)
// belongs to whoever placed the task, and a report never touches it.

// reportOf turns a snapshot into the agent-owned fields of a Task (the
// other fields empty). Values the resource service would default are
// filled the same way, so that a stored report compares equal to the one
// that was written.
func reportOf(s Snapshot, session string) *pborch.Task {
	t := &pborch.Task{
		LastStatus: s.Status,
		Health:     s.Health,
		StopReason: s.StopReason,
		StartedAt:  timestamp(s.StartedAt),
		StoppingAt: timestamp(s.StoppingAt),
		StoppedAt:  timestamp(s.StoppedAt),
		Session:    session,
	}
	if t.LastStatus == "" {
		t.LastStatus = orchestrator.StatusPending
	}
	if t.Health == "" {
		t.Health = orchestrator.HealthUnknown
	}
	for _, c := range s.Containers {
		cs := &pborch.ContainerState{
			Name:       c.Name,
			Status:     c.Status,
			Health:     c.Health,
			Reason:     c.Reason,
			Restarts:   int32(c.Restarts),
			StartedAt:  timestamp(c.StartedAt),
			FinishedAt: timestamp(c.FinishedAt),
			RuntimeId:  c.RuntimeID,
		}
		if cs.Status == "" {
			cs.Status = orchestrator.StatusPending
		}
		if c.ExitCode != nil {
			code := int32(*c.ExitCode)
			cs.ExitCode = &code
		}
		t.Containers = append(t.Containers, cs)
	}
	return t
}

func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// mergeReport is what the agent writes over a stored task
// (orchestrator.MergeReport), reported now.
func mergeReport(stored, report *pborch.Task, reportedAt time.Time) *pborch.Task {
	return orchestrator.MergeReport(stored, report, timestamppb.New(reportedAt))
}

// finishedSnapshot is the report of a task that stops here without its
// runner saying so: it never started (finish), or its runner ended
// without a STOPPED snapshot. Containers that were not seen to stop are
// marked stopped now, with an unknown exit code.
func finishedSnapshot(last Snapshot, reason string, now time.Time) Snapshot {
	s := last
	s.Containers = append([]ContainerStatus(nil), last.Containers...)
	s.Status = orchestrator.StatusStopped
	if s.StopReason == "" {
		s.StopReason = reason
	}
	if s.StoppedAt.IsZero() {
		s.StoppedAt = now
	}
	for i, c := range s.Containers {
		if c.Status == orchestrator.StatusStopped {
			continue
		}
		c.Status = orchestrator.StatusStopped
		if c.ExitCode == nil && !c.StartedAt.IsZero() {
			unknown := -1
			c.ExitCode = &unknown
		}
		if c.FinishedAt.IsZero() && !c.StartedAt.IsZero() {
			c.FinishedAt = now
		}
		s.Containers[i] = c
	}
	return s
}

// pendingSnapshot is the first report of a task the agent takes on: every
// container of its definition pending.
func pendingSnapshot(def *pborch.TaskDefinition) Snapshot {
	s := Snapshot{Status: orchestrator.StatusPending}
	for _, c := range def.GetContainers() {
		s.Containers = append(s.Containers, ContainerStatus{Name: c.GetName(), Status: orchestrator.StatusPending})
	}
	return s
}
