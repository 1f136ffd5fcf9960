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

// The agent's side of a task: its status["agent"], a TaskStatus. The
// Task's data (task_definition, instance, started_by, desired_status,
// created_at, ...) belongs to whoever placed the task, and a report never
// touches it.

// reportOf turns a snapshot (and the task's network) into the TaskStatus
// the agent reports
// (reported_at aside, which is set as it is written). Defaults are filled
// in, so that a stored report compares equal to the one that was written.
func reportOf(s Snapshot, net *pborch.TaskNetwork, session string) *pborch.TaskStatus {
	t := &pborch.TaskStatus{
		Network:    net,
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

// Report is one task's report, ready to write: its status["agent"],
// written as a CAS on the version of the task last seen.
type Report struct {
	Request *pbresource.WriteStatusRequest
	// Seq identifies the report to Written.
	Seq uint64
	// After is the uid of another report of the same batch that must be
	// stored before this one is written (the STOPPED report of the task
	// this one replaces); "" when none. If that one is not stored, this
	// one waits for the next batch.
	After string
}

// Reports builds the report of every dirty task, STOPPED reports first.
// A task whose environment has another task stopped here with its
// STOPPED report not yet stored (the task it replaced) waits unless that
// report is in the same batch, and then names it in After: the store
// never shows the two running. Whoever writes them must keep to that, and
// tell Written what the store took.
func (m *Manager) Reports() []Report {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := timestamppb.New(m.clock.Now())
	var out []pendingReport
	for _, t := range m.tasks {
		if !t.dirty() {
			continue
		}
		after := ""
		if o := m.unreportedStopLocked(t); o != nil {
			if !o.dirty() {
				continue // its turn comes once o's report is in
			}
			// Only a report that does not say STOPPED must follow: two
			// tasks of an environment stopped here may be reported in any
			// order (each would otherwise wait for the other).
			if t.snap.Status != orchestrator.StatusStopped {
				after = o.uid
			}
		}
		st := reportOf(t.snap, networkStatus(t.def, t.net), m.session)
		st.ReportedAt = now
		payload, err := anypb.New(st)
		if err != nil {
			m.log.Error("cannot encode a task report", "task", t.key(), "err", err)
			continue
		}
		out = append(out, pendingReport{t: t, Report: Report{Seq: t.seq, After: after, Request: &pbresource.WriteStatusRequest{
			Id:      t.res.GetId(),
			Version: t.res.GetVersion(),
			Key:     orchestrator.TaskStatusKey,
			Status:  &pbresource.Status{ObservedGeneration: t.res.GetGeneration(), Data: payload},
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
	t := m.tasks[r.Request.GetId().GetUid()]
	if t == nil {
		m.mu.Unlock()
		return // forgotten meanwhile: nothing more to do about it
	}
	t.written = max(t.written, r.Seq)
	if stored != nil && stored.GetId().GetUid() == t.uid && (!t.seen || !olderThan(stored, t.res)) {
		tk := &pborch.Task{}
		if err := stored.GetData().UnmarshalTo(tk); err == nil {
			t.res, t.stored, t.status, t.seen = stored, tk, orchestrator.TaskStatusOf(stored), true
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
