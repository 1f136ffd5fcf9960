package tasks

import (
	"context"
	"fmt"
	"slices"
	"time"

	"trellis.dev/trellis/internal/agent/component"
	"trellis.dev/trellis/internal/orchestrator"
)

// The agent's components' per-task hooks (package component): each
// component's Prestart after the task's namespace exists and before its
// runner starts, and, once the runner has returned, the Poststop of each
// component whose Prestart was called, in reverse. Progress is recorded in
// the task's record before a hook is called and after it returns, so that
// a restarted agent calls no completed Prestart again and every due
// Poststop once.

// Hooks is a component's per-task hooks, as the task manager runs them
// (component.Component without its Start).
type Hooks interface {
	Name() string
	Prestart(ctx context.Context, t component.Task) error
	Poststop(ctx context.Context, t component.Task) error
}

// hookTimeout bounds one hook call (a few calls to the servers).
const hookTimeout = 2 * time.Minute

// hookProgress is where a task is with its components' hooks; it is saved
// in the task's record.
type hookProgress struct {
	// Prestarts are the components whose Prestart was called, in the
	// order called; Done once it returned nil.
	Prestarts []hookStep `json:"prestarts,omitempty"`
	// Poststopped are the components whose Poststop has returned.
	Poststopped []string `json:"poststopped,omitempty"`
	// Ran: the task's runner was made, so the Prestarts are over; a
	// component added to the agent since gets no Prestart for the task
	// (its containers run already), nor a Poststop.
	Ran bool `json:"ran,omitempty"`
}

type hookStep struct {
	Component string `json:"component"`
	Done      bool   `json:"done,omitempty"`
}

func (p hookProgress) empty() bool { return len(p.Prestarts) == 0 && len(p.Poststopped) == 0 && !p.Ran }

func (p hookProgress) clone() hookProgress {
	return hookProgress{Prestarts: slices.Clone(p.Prestarts), Poststopped: slices.Clone(p.Poststopped), Ran: p.Ran}
}

// prestartDone says whether the component's Prestart completed.
func (p hookProgress) prestartDone(name string) bool {
	return slices.Contains(p.Prestarts, hookStep{Component: name, Done: true})
}

// calling records that the component's Prestart is about to be called
// (again, after a restart that cut it short: then it is recorded once).
func (p *hookProgress) calling(name string) {
	if !slices.ContainsFunc(p.Prestarts, func(s hookStep) bool { return s.Component == name }) {
		p.Prestarts = append(p.Prestarts, hookStep{Component: name})
	}
}

// prestarted records that the component's Prestart returned nil.
func (p *hookProgress) prestarted(name string) {
	for i := range p.Prestarts {
		if p.Prestarts[i].Component == name {
			p.Prestarts[i].Done = true
		}
	}
}

// poststopsDue are the components whose Poststop is due and has not
// returned, in the order to call them: the reverse of their Prestarts.
// Every component whose Prestart was called has one due, the one whose
// Prestart failed too (it may have half done its work).
func poststopsDue(p hookProgress) []string {
	var due []string
	for _, s := range slices.Backward(p.Prestarts) {
		if !slices.Contains(p.Poststopped, s.Component) {
			due = append(due, s.Component)
		}
	}
	return due
}

func (m *Manager) hook(name string) Hooks {
	for _, h := range m.cfg.Hooks {
		if h.Name() == name {
			return h
		}
	}
	return nil
}

// prestart calls, in order, the Prestart of every component that has not
// completed it for e, unless e's runner was made already. The error names
// the component.
func (m *Manager) prestart(e *task) error {
	for _, h := range m.cfg.Hooks {
		name := h.Name()
		m.mu.Lock()
		t := m.hookTaskLocked(e)
		done := e.hooks.Ran || e.hooks.prestartDone(name)
		if s, ok := h.(component.Selective); ok && !s.Applies(t) {
			done = true // not its task: no call, nothing recorded, no Poststop
		}
		if !done {
			e.hooks.calling(name)
		}
		m.mu.Unlock()
		if done {
			continue
		}
		m.persist(e) // before the call: a kill from here on calls Poststop
		ctx, cancel := context.WithTimeout(m.runCtxNow(), hookTimeout)
		err := h.Prestart(ctx, t)
		cancel()
		if err != nil {
			return fmt.Errorf("prestart of %s: %w", name, err)
		}
		m.mu.Lock()
		e.hooks.prestarted(name)
		m.mu.Unlock()
		m.persist(e)
		m.log.Debug("prestart done", "task", e.key(), "component", name)
	}
	return nil
}

// poststop calls the Poststops due for e, one after the other, recording
// each once it has returned. A Poststop's error is logged, and the task
// stops anyway (see package component). It returns false when the agent
// stopped meanwhile: the rest is due at its next start.
func (m *Manager) poststop(e *task) bool {
	ran := false
	for {
		m.mu.Lock()
		due := poststopsDue(e.hooks)
		t := m.hookTaskLocked(e)
		m.mu.Unlock()
		if len(due) == 0 {
			break
		}
		name := due[0]
		if h := m.hook(name); h == nil {
			m.log.Warn("a component the task was prepared by is no longer part of the agent; its poststop cannot run", "task", e.key(), "component", name)
		} else {
			runCtx := m.runCtxNow()
			ctx, cancel := context.WithTimeout(runCtx, hookTimeout)
			err := h.Poststop(ctx, t)
			cancel()
			if err != nil && runCtx.Err() != nil {
				return false
			}
			if err != nil {
				m.log.Error("poststop failed; the task stops anyway", "task", e.key(), "component", name, "err", err)
			}
		}
		m.mu.Lock()
		e.hooks.Poststopped = append(e.hooks.Poststopped, name)
		m.mu.Unlock()
		m.persist(e)
		ran = true
	}
	if ran {
		// The STOPPED snapshot onSnapshot held back is reported now,
		// unless the network's release still holds it (teardownNetwork
		// reports it then).
		m.mu.Lock()
		if e.hasReport && !e.forgotten && e.snap.Status == orchestrator.StatusStopped && (e.net == nil || e.net.Released) {
			e.changed(e.snap)
		}
		m.broadcastLocked()
		m.mu.Unlock()
		m.persist(e)
		m.signalReporter()
	}
	return true
}

// hookTaskLocked is e as its hooks see it.
func (m *Manager) hookTaskLocked(e *task) component.Task {
	id := orchestrator.TaskID(e.namespace, e.name)
	id.Uid = e.uid
	t := component.Task{ID: id, Definition: e.def, Dir: TaskDir(m.cfg.DataDir, e.uid)}
	md := networkMetadata(e.def, e.net)
	t.Network.Mode = md.Mode
	if isBridge(e.def) && e.net != nil && e.net.Attachment != nil {
		a := e.net.Attachment
		t.Network.NamespacePath, t.Network.Address, t.Network.Gateway = netnsOf(e.net), a.Address, a.Gateway
	}
	for _, p := range md.Ports {
		t.Network.Ports = append(t.Network.Ports, component.Port{Name: p.Name, ContainerPort: p.ContainerPort, HostPort: p.HostPort, Protocol: p.Protocol})
	}
	return t
}
