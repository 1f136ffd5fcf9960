package tasks

import "context"

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
