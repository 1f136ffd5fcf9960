package tasks

import (
	"encoding/json"
	"errors"
	"os"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/orchestrator"
)

// Keeping tasks across agent restarts: each task's record is written at
// every change and read back when the agent starts (state.go has the
// files).

// persist writes e's record (the latest state each time; persistMu keeps
// the writes in order).
func (m *Manager) persist(e *task) {
	e.persistMu.Lock()
	defer e.persistMu.Unlock()
	m.mu.Lock()
	if e.forgotten || !e.started {
		m.mu.Unlock()
		return
	}
	r := e.record()
	m.mu.Unlock()
	if err := m.state.saveRecord(r); err != nil {
		m.log.Error("cannot save the task's local state", "task", e.key(), "err", err)
	}
}

func (m *Manager) removeRecord(e *task) {
	e.persistMu.Lock()
	defer e.persistMu.Unlock()
	if err := os.Remove(m.state.recordPath(e.uid)); err != nil && !errors.Is(err, os.ErrNotExist) {
		m.log.Warn("cannot remove the task's local state", "task", e.key(), "err", err)
	}
	if !e.started {
		_ = os.RemoveAll(TaskDir(m.cfg.DataDir, e.uid))
	}
}

// resume takes on the tasks of the local state: those still running are
// re-attached through their runners, those done are reported.
func (m *Manager) resume() {
	records, errs := m.state.loadRecords()
	for _, err := range errs {
		m.log.Error("cannot read a task's local state; leaving the file as it is", "err", err)
	}
	keep := make(map[string]bool, len(records))
	var toRun []*task
	var states []json.RawMessage
	m.mu.Lock()
	for _, r := range records {
		keep[r.UID] = true
		def, err := r.definition()
		if err != nil {
			m.log.Error("cannot read a task's local state; leaving the file as it is", "task", r.Namespace+"/"+r.Name, "err", err)
			continue
		}
		e := m.addTaskLocked(r.Namespace, r.Name, r.UID)
		e.def, e.token, e.started = def, r.Token, true
		if res, err := r.resource(); err == nil {
			e.res = res
			e.stored = &pborch.Task{}
			_ = res.GetData().UnmarshalTo(e.stored)
			e.status = orchestrator.TaskStatusOf(res)
		}
		e.stopReason, e.silent = r.StopReason, r.Silent
		e.net = r.Network
		if r.Hooks != nil {
			e.hooks = *r.Hooks
		}
		e.snap = r.Snapshot
		e.hasReport = r.Snapshot.Status != ""
		e.seq = 1 // this session has reported nothing yet
		if e.token != "" {
			m.tokens[e.token] = e
		}
		if r.Done {
			e.phase = phaseDone
			continue
		}
		// Not done, even if the last snapshot says STOPPED: the runner may
		// not have released its containers yet, and resuming lets it.
		e.phase = phaseRunning
		if e.stopReason != "" {
			e.phase = phaseStopping
		}
		toRun = append(toRun, e)
		states = append(states, r.Snapshot.State)
	}
	m.mu.Unlock()
	m.state.removeOrphans(keep)
	for i, e := range toRun {
		m.log.Info("resuming task", "task", e.key(), "uid", e.uid)
		m.run(e, states[i])
	}
}
