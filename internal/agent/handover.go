package agent

import (
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/orchestrator"
)

// The handover from one task of a daemon environment to its replacement.
//
// The scheduler stops a task and places its replacement in one write, the
// new task naming the old (Task.replaces). The agent starts the new task
// only once the old one has stopped here and its STOPPED report is
// stored: two copies never run at once, and the store never shows two
// RUNNING, while no round trip through the scheduler separates the stop
// from the start.

// predecessorLocked returns the task of e's environment that e must let
// stop first (nil when e may start): one that holds the instance or has
// stopped here without its report stored yet, and that e replaces or
// that is stopping anyway. A live task of the environment that is meant
// to go on running is not one: the admission refuses e beside it.
func (a *Agent) predecessorLocked(e *task) *task {
	env := e.stored.GetEnvironment()
	if env == "" {
		return nil
	}
	for _, o := range a.tasks {
		if o == e || o.namespace != e.namespace || !o.blocks() || taskEnvironment(o) != env {
			continue
		}
		if o.name == e.stored.GetReplaces() || o.stoppingHere() {
			return o
		}
	}
	return nil
}

// blocks: the task holds the instance, or has stopped here and its
// STOPPED report is not stored yet.
func (t *task) blocks() bool {
	if t.forgotten {
		return false
	}
	return t.phase.live() || (t.phase == phaseDone && !t.reportedLocked())
}

// stoppingHere: the task is on its way out (asked to stop, deleted, or
// stopped already).
func (t *task) stoppingHere() bool {
	return t.stopReason != "" || t.deleted || t.phase == phaseStopping || t.phase == phaseDone ||
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

// successorsLocked reconciles the tasks that wait for done, once it no
// longer blocks them.
func (a *Agent) successorsLocked(done *task) effects {
	var fx effects
	if done.blocks() {
		return fx
	}
	env := taskEnvironment(done)
	if env == "" {
		return fx
	}
	for _, o := range a.tasks {
		if o != done && o.phase == phaseIdle && o.namespace == done.namespace && o.stored.GetEnvironment() == env {
			fx.merge(a.reconcileLocked(o))
		}
	}
	return fx
}
