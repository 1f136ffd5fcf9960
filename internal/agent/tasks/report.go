package tasks

import (
	"cmp"
	"slices"

	"time"

	"google.golang.org/protobuf/types/known/anypb"
	pbresource "trellis.dev/trellis/api/resource/v1"

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

// Report is one task's report, ready to write: the task as the store had
// it with the agent's fields merged in, written as a CAS on its version.
type Report struct {
	Resource *pbresource.Resource
	// Seq identifies the report to Written.
	Seq uint64
}

// Reports builds the report of every dirty task, STOPPED reports first.
// A task whose environment has another task stopped here with its
// STOPPED report not yet stored (the task it replaced) waits unless that
// report is in the same batch: the store never shows the two running.
// Whoever writes them must keep their order, and tell Written what the
// store took.
func (m *Manager) Reports() []Report {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	var out []pendingReport
	for _, t := range m.tasks {
		if !t.dirty() {
			continue
		}
		if o := m.unreportedStopLocked(t); o != nil && !o.dirty() {
			continue // its turn comes once o's report is in
		}
		merged := mergeReport(t.stored, reportOf(t.snap, m.session), now)
		data, err := anypb.New(merged)
		if err != nil {
			m.log.Error("cannot encode a task report", "task", t.key(), "err", err)
			continue
		}
		out = append(out, pendingReport{t: t, Report: Report{Seq: t.seq, Resource: &pbresource.Resource{
			Id:       t.res.GetId(),
			Owner:    t.res.GetOwner(),
			Metadata: t.res.GetMetadata(),
			Version:  t.res.GetVersion(),
			Data:     data,
		}}})
	}
	slices.SortStableFunc(out, func(x, y pendingReport) int {
		return cmp.Compare(stoppedFirst(x.t), stoppedFirst(y.t))
	})
	reports := make([]Report, len(out))
	for i, p := range out {
		reports[i] = p.Report
	}
	return reports
}

// pendingReport is a report with its task, while Reports orders them.
type pendingReport struct {
	t *task
	Report
}

func stoppedFirst(t *task) int {
	if t.snap.Status == orchestrator.StatusStopped {
		return 0
	}
	return 1
}

// Written records that the store took a report (stored: what it stored;
// nil when the report was dropped, refused for good).
func (m *Manager) Written(r Report, stored *pbresource.Resource) {
	m.mu.Lock()
	t := m.tasks[r.Resource.GetId().GetUid()]
	if t == nil {
		m.mu.Unlock()
		return // forgotten meanwhile: nothing more to do about it
	}
	t.written = max(t.written, r.Seq)
	if stored != nil && stored.GetId().GetUid() == t.uid && (!t.seen || stored.GetGeneration() >= t.res.GetGeneration()) {
		tk := &pborch.Task{}
		if err := stored.GetData().UnmarshalTo(tk); err == nil {
			t.res, t.stored, t.seen = stored, tk, true
		}
	}
	// The answer is what the store has now: a task whose STOPPED report
	// is in is done with.
	fx := m.reconcileLocked(t)
	m.mu.Unlock()
	m.apply(fx)
}

// reportedLocked: nothing of t is left to write.
func (t *task) reportedLocked() bool {
	return t.silent || t.deleted || !t.hasReport || t.written >= t.seq
}
