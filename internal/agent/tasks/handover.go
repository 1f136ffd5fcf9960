package tasks

import (
	"iter"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/orchestrator"
)

// The handover from one task of a daemon environment to its replacement.
//
// The scheduler stops a task and places its replacement in one write, the
// new task naming the old (Task.replaces). The agent starts the new task
// as soon as the old one has stopped here: two copies never run at once,
// and no round trip through the scheduler or the store separates the stop
// from the start. The reporter keeps the store in step: it never writes
// the new task's report before the old task's STOPPED report (both go in
// one atomic batch, the old first), so the store never shows two RUNNING.

// siblingsLocked yields the other tasks the agent knows of e's
// environment and namespace (none for a task of no environment).
func (m *Manager) siblingsLocked(e *task) iter.Seq[*task] {
	return func(yield func(*task) bool) {
		env := taskEnvironment(e)
		if env == "" {
			return
		}
		for _, o := range m.tasks {
			if o != e && !o.forgotten && o.namespace == e.namespace && taskEnvironment(o) == env && !yield(o) {
				return
			}
		}
	}
}

// predecessorLocked returns the task of e's environment that e must let
// stop first (nil when e may start): one that still holds the instance,
// and that e replaces or that is stopping anyway. A live task of the
// environment that is meant to go on running is not one: the admission
// refuses e beside it.
func (m *Manager) predecessorLocked(e *task) *task {
	for o := range m.siblingsLocked(e) {
		if o.phase.live() && (o.name == e.stored.GetReplaces() || o.stoppingHere()) {
			return o
		}
	}
	return nil
}

// unreportedStopLocked returns another task of e's environment that has
// stopped here without its STOPPED report stored (nil when none): e's
// report must not reach the store before that one.
func (m *Manager) unreportedStopLocked(e *task) *task {
	for o := range m.siblingsLocked(e) {
		if o.phase == phaseDone && !o.reportedLocked() {
			return o
		}
	}
	return nil
}

// stoppingHere: the task is on its way out (asked to stop, deleted, or
// stopping).
func (t *task) stoppingHere() bool {
	return t.stopReason != "" || t.deleted || t.phase == phaseStopping ||
		t.stored.GetDesiredStatus() == orchestrator.StatusStopped
}

// taskEnvironment is the daemon environment of a task ("" for none); a
// task deleted from the store is read from its last stored resource.
func taskEnvironment(t *task) string {
	if t.stored != nil {
		return t.stored.GetEnvironment()
	}
	var tk pborch.Task
	if t.res.GetData().UnmarshalTo(&tk) != nil {
		return ""
	}
	return tk.GetEnvironment()
}

// successorsLocked reconciles the tasks that may have waited for done,
// which has just stopped here.
func (m *Manager) successorsLocked(done *task) effects {
	var fx effects
	for o := range m.siblingsLocked(done) {
		if o.phase == phaseIdle {
			fx.merge(m.reconcileLocked(o))
		}
	}
	return fx
}
