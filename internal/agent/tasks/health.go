package tasks

import (
	"slices"

	"trellis.dev/trellis/internal/agent/component"
	"trellis.dev/trellis/internal/orchestrator"
)

// The components that follow their tasks' health (component.HealthObserver)
// are given each change of a task's TaskHealth, from the runner's report
// path, while they have the task: after their Prestart completed, before
// their Poststop.

// healthOf is a snapshot's health in the one vocabulary, as the
// components see it.
func healthOf(s Snapshot) component.TaskHealth {
	st := reportOf(s, nil, "")
	h := component.TaskHealth{
		Status:     st.GetLastStatus(),
		Stopping:   !s.StoppingAt.IsZero() || s.Status == orchestrator.StatusStopped,
		StopReason: s.StopReason,
		Health:     orchestrator.TaskHealth(st),
	}
	for _, c := range s.Containers {
		h.Containers = append(h.Containers, component.ContainerHealth{
			Name:     c.Name,
			HasCheck: c.Health != "",
			Health:   orchestrator.ContainerHealth(st, c.Name),
			Output:   c.HealthOutput,
		})
	}
	return h
}

func sameHealth(a, b component.TaskHealth) bool {
	return a.Status == b.Status && a.Stopping == b.Stopping && a.StopReason == b.StopReason &&
		a.Health == b.Health && slices.Equal(a.Containers, b.Containers)
}

// observeHealth gives s's health to the components that observe it and
// have e, when it differs from the last given. It is called on e's
// runner's report path (one call at a time for e), without m.mu held.
func (m *Manager) observeHealth(e *task, s Snapshot) {
	h := healthOf(s)
	m.mu.Lock()
	if e.phase == phaseDone || e.forgotten || e.health != nil && sameHealth(*e.health, h) {
		m.mu.Unlock()
		return
	}
	e.health = &h
	t := m.hookTaskLocked(e)
	var to []component.HealthObserver
	for _, hk := range m.cfg.Hooks {
		o, ok := hk.(component.HealthObserver)
		if ok && e.hooks.prestartDone(hk.Name()) && !slices.Contains(e.hooks.Poststopped, hk.Name()) {
			to = append(to, o)
		}
	}
	m.mu.Unlock()
	for _, o := range to {
		o.TaskHealthChanged(t, h)
	}
}
