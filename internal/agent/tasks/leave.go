package tasks

import (
	"context"
	"sort"
	"time"

	"trellis.dev/trellis/internal/orchestrator"
)

// Leaving the cluster, the task manager's part: stop every task, wait
// until the store has their STOPPED reports, then drop their local state.
// The agent marks the Instance left in between.

// StopAll stops every task (each with its stop timeout) and starts no new
// one from now on.
func (m *Manager) StopAll() {
	m.mu.Lock()
	m.leaving = true
	var fx effects
	for _, e := range m.tasks {
		if e.phase.live() {
			fx.merge(m.stopLocked(e, ReasonLeaving))
		}
	}
	m.broadcastLocked()
	m.mu.Unlock()
	m.apply(fx)
}

// WaitStopped waits until every task has stopped and its last report is
// stored, or ctx ends.
func (m *Manager) WaitStopped(ctx context.Context) error {
	return m.waitFor(ctx, func() bool {
		for _, e := range m.tasks {
			if e.phase.live() || !e.reportedLocked() {
				return false
			}
		}
		return true
	})
}

// ForgetDone drops every task that has stopped here, and its local state:
// once the instance has left, nothing of them is needed.
func (m *Manager) ForgetDone() {
	m.mu.Lock()
	var done []*task
	for _, e := range m.tasks {
		if e.phase == phaseDone {
			m.forgetLocked(e)
			done = append(done, e)
		}
	}
	m.mu.Unlock()
	for _, e := range done {
		m.removeRecord(e)
	}
}

// Leaving reports whether StopAll was called.
func (m *Manager) Leaving() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.leaving
}

// StoppingTask is a task the agent is waiting for to stop.
type StoppingTask struct {
	// Task is "namespace/name".
	Task string
	// Since is when it was asked to stop (zero when not known yet).
	Since time.Time
	// Timeout is the longest stop timeout of its containers that still
	// run: how long a container that ignores SIGTERM holds the stop before
	// its SIGKILL.
	Timeout time.Duration
	// Containers are the names of its containers that still run.
	Containers []string
}

// Stopping lists the tasks being stopped that have not stopped yet.
func (m *Manager) Stopping() []StoppingTask {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []StoppingTask
	for _, e := range m.tasks {
		if e.phase != phaseStopping {
			continue
		}
		st := StoppingTask{Task: e.key(), Since: e.snap.StoppingAt}
		running := map[string]bool{}
		for _, c := range e.snap.Containers {
			if c.Status != orchestrator.StatusStopped {
				running[c.Name] = true
			}
		}
		for _, c := range e.def.GetContainers() {
			if !running[c.GetName()] {
				continue
			}
			st.Containers = append(st.Containers, c.GetName())
			st.Timeout = max(st.Timeout, orchestrator.StopTimeout(c))
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Task < out[j].Task })
	return out
}
