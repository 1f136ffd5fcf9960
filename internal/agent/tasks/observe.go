package tasks

import (
	"os"
	"strconv"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/orchestrator"
)

// apply does the effects.
func (m *Manager) apply(fx effects) {
	for _, r := range fx.stops {
		r.runner.Stop(r.reason)
	}
	// Starts run in goroutines of their own: they go first, so that a
	// replacement does not wait for the record of the task it replaces to
	// be written.
	m.startAll(fx.start)
	for _, t := range fx.persist {
		m.persist(t)
	}
	for _, t := range fx.forget {
		m.removeRecord(t)
	}
	if fx.signal {
		m.signalReporter()
	}
}

// startAll starts tasks, each in its own goroutine, through the attached
// server session; with none attached, they go back to idle and the next
// session's resync starts them.
func (m *Manager) startAll(start []*task) {
	if len(start) == 0 {
		return
	}
	// The Add happens under m.mu while the link is attached, so before
	// its detach waits for its starts.
	m.mu.Lock()
	l := m.link
	if l != nil {
		l.starts.Add(len(start))
	} else {
		for _, t := range start {
			t.phase = phaseIdle
		}
	}
	m.mu.Unlock()
	if l == nil {
		return
	}
	for _, t := range start {
		go func() {
			defer l.starts.Done()
			m.start(l, t)
		}()
	}
}

// Observe takes in a task as the store has it (or its deletion: res is
// then the last version known) and acts on it.
func (m *Manager) Observe(res *pbresource.Resource, deleted bool) {
	t, ok := m.decodeTask(res, deleted)
	if !ok {
		return
	}
	m.mu.Lock()
	var fx effects
	if e := m.takeLocked(res, t, deleted); e != nil {
		fx = m.reconcileLocked(e)
	}
	m.mu.Unlock()
	m.apply(fx)
}

// listedTask is a task of this instance from a fresh listing, decoded.
type listedTask struct {
	res *pbresource.Resource
	t   *pborch.Task
}

// listed decodes a task of a fresh listing; false when it is not this
// instance's (a task's instance never changes) or does not decode.
func (m *Manager) listed(res *pbresource.Resource) (listedTask, bool) {
	t, ok := m.decodeTask(res, false)
	if !ok || t.GetInstance() != m.cfg.Instance {
		return listedTask{}, false
	}
	return listedTask{res, t}, true
}

// ObserveListing takes in a fresh listing of the instance's tasks, whole:
// every task it shows, then the deletion of every task it does not show
// (deleted meanwhile). The caller hands it over only once the listing has
// ended: a listing cut short is never acted on.
//
// All its tasks are taken in before any is acted on: what one task may do
// depends on the others of its environment (a replacement waits for the
// task it replaces, and its report for that task's STOPPED report), and a
// listing comes in no particular order. Acting on each as it came, an
// agent that lost its local state could start and report a replacement
// before it had even heard of the task the replacement takes over from.
func (m *Manager) ObserveListing(listing []*pbresource.Resource) {
	seen := make(map[string]bool, len(listing))
	var own []listedTask
	for _, res := range listing {
		seen[res.GetId().GetUid()] = true
		if l, ok := m.listed(res); ok {
			own = append(own, l)
		}
	}
	m.mu.Lock()
	var tasks []*task
	for _, l := range own {
		if e := m.takeLocked(l.res, l.t, false); e != nil {
			tasks = append(tasks, e)
		}
	}
	var fx effects
	for _, e := range tasks {
		fx.merge(m.reconcileLocked(e))
	}
	m.mu.Unlock()
	m.apply(fx)
	m.sweep(seen)
}

// decodeTask decodes a task from the store (nil for a deletion); false
// when it does not decode, which is logged.
func (m *Manager) decodeTask(res *pbresource.Resource, deleted bool) (*pborch.Task, bool) {
	if deleted {
		return nil, true
	}
	t := &pborch.Task{}
	if err := res.GetData().UnmarshalTo(t); err != nil {
		m.log.Error("cannot decode a task; ignoring it", "task", res.GetId().GetName(), "err", err)
		return nil, false
	}
	return t, true
}

// takeLocked records what the store says of a task and returns the task
// to reconcile (nil when there is nothing to act on).
func (m *Manager) takeLocked(res *pbresource.Resource, t *pborch.Task, deleted bool) *task {
	uid := res.GetId().GetUid()
	if m.gone.has(uid) {
		// Forgotten once the store showed it stopped: anything the watch
		// still brings of it is older (or a deletion).
		if deleted {
			m.gone.remove(uid)
		}
		return nil
	}
	e := m.tasks[uid]
	if e == nil {
		if deleted || t.GetInstance() != m.cfg.Instance || orchestrator.TaskStatusOf(res).GetLastStatus() == orchestrator.StatusStopped {
			return nil
		}
		e = m.addTaskLocked(res.GetId().GetTenancy().GetNamespace(), res.GetId().GetName(), res.GetId().GetUid())
	}
	switch {
	case deleted:
		e.deleted = true
		e.stored, e.status = nil, nil
	case !e.seen || !olderThan(res, e.res):
		// Never go back to an older version: a write's answer can come
		// before the watch delivers what preceded it.
		e.res, e.stored, e.status, e.seen = res, t, orchestrator.TaskStatusOf(res), true
	}
	return e
}

func (m *Manager) addTaskLocked(ns, name, uid string) *task {
	e := &task{uid: uid, namespace: ns, name: name}
	m.tasks[uid] = e
	m.byName[e.key()] = e
	m.broadcastLocked()
	return e
}

// reconcileLocked decides what to do about e and makes the state changes
// of that decision; it returns the I/O to do. Called with m.mu held.
func (m *Manager) reconcileLocked(e *task) effects {
	var fx effects
	if e.forgotten {
		return fx
	}
	if !e.seen && !e.deleted {
		return fx // resumed from local state; the store has not spoken yet
	}
	var stored *pborch.Task
	var status *pborch.TaskStatus
	if !e.deleted {
		stored, status = e.stored, e.status
	}
	mine := reportOf(e.snap, networkStatus(e.def, e.net), m.session)
	reported := e.written >= e.seq && (stored == nil || orchestrator.SameReport(status, mine) || e.repairs >= MaxRepairs)
	waiting := e.phase == phaseIdle && stored.GetDesiredStatus() == orchestrator.StatusRunning &&
		status.GetLastStatus() == orchestrator.StatusPending && m.predecessorLocked(e) != nil
	d := decide(situation{stored: stored, status: status, phase: e.phase, reported: reported, leaving: m.leaving, waiting: waiting})
	if d.silent && !e.silent {
		e.silent = true
		fx.persist = append(fx.persist, e)
	}
	switch {
	case d.start:
		e.phase = phaseStarting
		fx.start = append(fx.start, e)
	case d.stop != "":
		fx.merge(m.stopLocked(e, d.stop))
	case d.finish != "":
		e.phase = phaseDone
		e.changed(finishedSnapshot(e.snap, d.finish, m.clock.Now()))
		m.log.Info("task stops without running here", "task", e.key(), "reason", d.finish)
	case d.forget:
		m.forgetLocked(e)
		fx.forget = append(fx.forget, e)
		return fx
	default:
		// Nothing to decide: repair the store if it no longer carries the
		// report (the servers marked the task lost, a new session began).
		if e.hasReport && !e.silent && stored != nil && e.written >= e.seq && !orchestrator.SameReport(status, mine) && e.repairs < MaxRepairs {
			e.repairs++
			e.seq++
			m.log.Info("the store differs from the agent's report; reporting again", "task", e.key(), "stored", status.GetLastStatus(), "report", mine.GetLastStatus())
		}
	}
	if e.dirty() {
		fx.signal = true
	}
	m.broadcastLocked()
	return fx
}

// stopLocked asks a starting or running task to stop.
func (m *Manager) stopLocked(e *task, reason string) effects {
	var fx effects
	if e.stopReason == "" {
		e.stopReason = reason
	}
	switch e.phase {
	case phaseStarting:
		// The start sees stopReason once the definition is resolved.
	case phaseRunning:
		e.phase = phaseStopping
		m.log.Info("stopping task", "task", e.key(), "reason", e.stopReason)
		if e.runner != nil {
			fx.stops = append(fx.stops, stopRequest{e.runner, e.stopReason})
		}
		fx.persist = append(fx.persist, e)
	}
	return fx
}

// forgetLocked drops a task the agent is done with; it stays among the
// finished (for its logs and metadata) if it ran here.
func (m *Manager) forgetLocked(e *task) {
	e.forgotten = true
	delete(m.tasks, e.uid)
	m.broadcastLocked()
	if !e.deleted {
		m.gone.add(e.uid)
	}
	if !e.started {
		m.dropNamesLocked(e)
		return
	}
	m.finished = append(m.finished, e)
	if len(m.finished) > finishedKept {
		old := m.finished[0]
		m.finished = m.finished[1:]
		m.dropNamesLocked(old)
		go func() {
			if err := os.RemoveAll(TaskDir(m.cfg.DataDir, old.uid)); err != nil {
				m.log.Warn("cannot remove a finished task's directory", "task", old.key(), "err", err)
			}
		}()
	}
}

func (m *Manager) dropNamesLocked(e *task) {
	if m.byName[e.key()] == e {
		delete(m.byName, e.key())
	}
	if e.token != "" && m.tokens[e.token] == e {
		delete(m.tokens, e.token)
	}
}

// Resync reconciles every task again, with session as the server
// session id of the reports from now on: at the start of a session, so that
// starts a lost session cut short are tried again, and when the agent
// registers a new session. A new session also renews each task's
// allowance of repairs: the servers mark an instance's tasks LOST each
// time they find it down, and an agent that flapped used up its repairs
// re-reporting into a down instance; without a fresh allowance its
// running tasks stayed LOST in the store for good.
func (m *Manager) Resync(session string) {
	m.mu.Lock()
	m.session = session
	var fx effects
	for _, e := range m.tasks {
		e.repairs = 0
		fx.merge(m.reconcileLocked(e))
	}
	m.mu.Unlock()
	m.apply(fx)
}

// sweep treats every task that a fresh listing did not show as deleted.
func (m *Manager) sweep(seen map[string]bool) {
	m.mu.Lock()
	var fx effects
	m.gone.keepOnly(seen)
	for uid, e := range m.tasks {
		if !seen[uid] {
			e.deleted = true
			e.stored, e.status = nil, nil
			fx.merge(m.reconcileLocked(e))
		}
	}
	m.mu.Unlock()
	m.apply(fx)
}

// olderThan reports whether res is an older version of the task than
// seen. Versions grow with every write (they are the store's index), the
// agent's own reports included, which do not move the generation.
func olderThan(res, seen *pbresource.Resource) bool {
	v, err1 := strconv.ParseUint(res.GetVersion(), 10, 64)
	w, err2 := strconv.ParseUint(seen.GetVersion(), 10, 64)
	if err1 != nil || err2 != nil {
		return res.GetGeneration() < seen.GetGeneration()
	}
	return v < w
}
