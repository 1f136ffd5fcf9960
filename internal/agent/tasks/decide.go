package tasks

import (
	"fmt"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/orchestrator"
)

// phase is where the agent is with one task.
type phase int

const (
	// phaseIdle: known from the store, never run here.
	phaseIdle phase = iota
	// phaseStarting: its definition is being resolved; no runner yet.
	phaseStarting
	// phaseRunning: its runner runs.
	phaseRunning
	// phaseStopping: its runner was asked to stop.
	phaseStopping
	// phaseDone: it has stopped here (or was never run and is reported
	// STOPPED); what remains is to see the report stored.
	phaseDone
)

func (p phase) String() string {
	switch p {
	case phaseIdle:
		return "idle"
	case phaseStarting:
		return "starting"
	case phaseRunning:
		return "running"
	case phaseStopping:
		return "stopping"
	case phaseDone:
		return "done"
	}
	return fmt.Sprintf("phase(%d)", int(p))
}

// live: the task holds the instance's resources, or is about to.
func (p phase) live() bool { return p == phaseStarting || p == phaseRunning || p == phaseStopping }

// situation is what decide looks at: the task as stored (nil once it is
// deleted) and the agent's side of it.
type situation struct {
	stored *pborch.Task
	// status is what the store says of it: the last report stored, or
	// the servers' LOST (nil once it is deleted).
	status *pborch.TaskStatus
	phase  phase
	// reported: the agent's last report is stored (nothing newer to write).
	reported bool
	// leaving: the agent is leaving the cluster and starts nothing new.
	leaving bool
	// waiting: another task of its environment must stop here first (the
	// one it replaces).
	waiting bool
}

// decision is what to do about a task. At most one of start, stop, finish
// and forget is set.
type decision struct {
	// start: resolve its definition and run it.
	start bool
	// stop: ask the runner to stop, with this reason.
	stop string
	// finish: report it STOPPED with this reason without running it.
	finish string
	// forget: drop it from the agent (and its local state).
	forget bool
	// silent: the task is gone from the store; report nothing more.
	silent bool
}

// Reasons the agent gives in stop_reason.
const (
	ReasonDesiredStopped = "stopped: desired status is STOPPED"
	ReasonDeleted        = "the task was deleted"
	ReasonLeaving        = "the instance is leaving the cluster"
)

// decide says what to do about a task, from what the store says and where
// the agent is with it. It is level-based: calling it again with the same
// situation gives the same answer, and an answer the agent has acted on
// moves the phase so that it is not given twice.
//
// The rule it keeps above all: a task is started at most once, and only
// from PENDING. A task the store says is RUNNING or LOST but that this
// agent does not run is reported STOPPED, never started again; replacing
// it is the scheduler's business.
func decide(s situation) decision {
	t, st := s.stored, s.status
	if t == nil { // deleted
		switch s.phase {
		case phaseStarting, phaseRunning:
			return decision{stop: ReasonDeleted, silent: true}
		case phaseStopping:
			return decision{silent: true}
		}
		return decision{forget: true}
	}
	if st.GetLastStatus() == orchestrator.StatusStopped {
		switch s.phase {
		case phaseIdle:
			return decision{forget: true}
		case phaseDone:
			if s.reported {
				return decision{forget: true}
			}
			return decision{}
		}
		// The store says STOPPED while it runs here: someone else wrote
		// that. Desired status decides; a running task re-reports itself.
	}
	if t.GetDesiredStatus() == orchestrator.StatusStopped {
		switch s.phase {
		case phaseIdle:
			if st.GetLastStatus() == orchestrator.StatusPending {
				return decision{finish: "stopped before it started: desired status is STOPPED"}
			}
			return decision{finish: notRunHere(t, st)}
		case phaseStarting, phaseRunning:
			// Whoever stopped it may have said why (trellis task stop
			// --reason, a deployment); that is the task's stop reason.
			if r := t.GetStopReason(); r != "" {
				return decision{stop: r}
			}
			return decision{stop: ReasonDesiredStopped}
		}
		return decision{}
	}
	// Desired RUNNING.
	if s.phase != phaseIdle {
		return decision{}
	}
	switch st.GetLastStatus() {
	case orchestrator.StatusPending:
		if s.leaving || s.waiting {
			return decision{}
		}
		return decision{start: true}
	case orchestrator.StatusRunning, orchestrator.StatusLost:
		return decision{finish: notRunHere(t, st)}
	}
	return decision{}
}

func notRunHere(t *pborch.Task, st *pborch.TaskStatus) string {
	if st.GetLastStatus() == orchestrator.StatusLost {
		return orchestrator.LostReason(t.GetInstance())
	}
	return "it no longer runs on instance " + t.GetInstance() + ": the agent has no record of it"
}
