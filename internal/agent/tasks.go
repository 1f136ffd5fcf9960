package agent

import (
	"context"
	"encoding/json"
	"os"
	"sync"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/orchestrator"
)

// task is one task the agent knows: from the store (placed on this
// instance), from its local state, or both. Fields are guarded by Agent.mu
// unless said otherwise.
type task struct {
	uid, namespace, name string

	// res is the task as last seen in the store, stored its data; seen
	// says the store has shown it since the agent started (a task resumed
	// from local state has the res it was started with until then).
	// deleted: the store no longer has it.
	res     *pbresource.Resource
	stored  *pborch.Task
	seen    bool
	deleted bool

	// The encodings record() last made of def (immutable) and of res (as
	// of resJSONOf): a task is saved at every change of its state, and
	// re-encoding both each time was a sizeable part of the agent's CPU
	// per task.
	defJSON   json.RawMessage
	resJSON   json.RawMessage
	resJSONOf *pbresource.Resource

	phase  phase
	def    *pborch.TaskDefinition
	token  string
	runner TaskRunner

	// snap is the task's latest state; hasReport says it is a report to
	// write (from the runner, a finish, or local state).
	snap      Snapshot
	hasReport bool
	// seq grows with every change to report; written is the seq of the
	// last report the store took.
	seq, written uint64
	// repairs counts re-reports made because the store differed from the
	// report, since the last change (bounded, so that a server that keeps
	// rewriting cannot make the agent loop).
	repairs int

	stopReason string // a stop was asked for
	silent     bool   // deleted from the store: report nothing
	started    bool   // Run was called
	forgotten  bool

	// persistMu orders the writes of this task's record.
	persistMu sync.Mutex
}

const maxRepairs = 3

func (t *task) key() string { return t.namespace + "/" + t.name }

// dirty: a report is waiting to be written.
func (t *task) dirty() bool {
	return t.hasReport && !t.silent && t.written < t.seq && t.seen && !t.deleted
}

// changed records a new snapshot to report.
func (t *task) changed(s Snapshot) {
	t.snap = s
	t.hasReport = true
	t.seq++
	t.repairs = 0
}

// record is what is saved of t. It runs under the agent's lock.
func (t *task) record() *record {
	if t.defJSON == nil {
		t.defJSON, _ = encodeDefinition(t.def)
	}
	if t.resJSONOf != t.res || t.resJSON == nil {
		t.resJSON, _ = encodeResource(t.res)
		t.resJSONOf = t.res
	}
	return &record{
		Namespace:  t.namespace,
		Name:       t.name,
		UID:        t.uid,
		Resource:   t.resJSON,
		Definition: t.defJSON,
		Token:      t.token,
		Snapshot:   t.snap,
		Started:    t.started,
		StopReason: t.stopReason,
		Silent:     t.silent,
		Done:       t.phase == phaseDone,
	}
}

// effects are what a change under a.mu asks to be done once it is
// released: the I/O.
type effects struct {
	start   []*task
	stops   []stopRequest
	persist []*task
	forget  []*task
	signal  bool
}

type stopRequest struct {
	runner TaskRunner
	reason string
}

func (fx *effects) merge(o effects) {
	fx.start = append(fx.start, o.start...)
	fx.stops = append(fx.stops, o.stops...)
	fx.persist = append(fx.persist, o.persist...)
	fx.forget = append(fx.forget, o.forget...)
	fx.signal = fx.signal || o.signal
}

// apply does the effects. s is the server session that starts need (nil:
// starts wait for the next session's resync).
func (a *Agent) apply(ctx context.Context, s *session, fx effects) {
	for _, r := range fx.stops {
		r.runner.Stop(r.reason)
	}
	// Starts run in goroutines of their own: they go first, so that a
	// replacement does not wait for the record of the task it replaces to
	// be written.
	a.startAll(ctx, s, fx.start)
	for _, t := range fx.persist {
		a.persist(t)
	}
	for _, t := range fx.forget {
		a.removeRecord(t)
	}
	if fx.signal {
		a.signalReporter()
	}
}

// startAll starts tasks, each in its own goroutine, on session s (nil:
// the current one, if any).
func (a *Agent) startAll(ctx context.Context, s *session, start []*task) {
	if len(start) == 0 {
		return
	}
	if s == nil {
		// A change outside a session (a task that stopped, a report
		// written) lets another start: on the current session, if any.
		// The Add happens under a.mu while it is current, so before the
		// session's end waits for its starts.
		a.mu.Lock()
		if s = a.current; s != nil {
			s.starts.Add(len(start))
			ctx = s.ctx
		} else {
			for _, t := range start {
				t.phase = phaseIdle // the next session's resync starts it
			}
		}
		a.mu.Unlock()
		if s == nil {
			return
		}
	} else {
		s.starts.Add(len(start))
	}
	for _, t := range start {
		go func() {
			defer s.starts.Done()
			a.start(ctx, s, t)
		}()
	}
}

// observe takes in a task as the store has it (or its deletion) and acts
// on it.
func (a *Agent) observe(ctx context.Context, s *session, res *pbresource.Resource, deleted bool) {
	t, ok := a.decodeTask(res, deleted)
	if !ok {
		return
	}
	a.mu.Lock()
	var fx effects
	if e := a.takeLocked(res, t, deleted); e != nil {
		fx = a.reconcileLocked(e)
	}
	a.mu.Unlock()
	a.apply(ctx, s, fx)
}

// listedTask is a task of this instance from a fresh listing, decoded.
type listedTask struct {
	res *pbresource.Resource
	t   *pborch.Task
}

// listed decodes a task of a fresh listing; false when it is not this
// instance's (a task's instance never changes) or does not decode.
func (a *Agent) listed(res *pbresource.Resource) (listedTask, bool) {
	t, ok := a.decodeTask(res, false)
	if !ok || t.GetInstance() != a.cfg.Name {
		return listedTask{}, false
	}
	return listedTask{res, t}, true
}

// observeListing takes in a fresh listing's tasks, all of them, before it
// acts on any: what one task may do depends on the others of its
// environment (a replacement waits for the task it replaces, and its
// report for that task's STOPPED report), and a listing comes in no
// particular order. Acting on each as it came, an agent that lost its
// local state could start and report a replacement before it had even
// heard of the task the replacement takes over from.
func (a *Agent) observeListing(ctx context.Context, s *session, listing []listedTask) {
	a.mu.Lock()
	var tasks []*task
	for _, l := range listing {
		if e := a.takeLocked(l.res, l.t, false); e != nil {
			tasks = append(tasks, e)
		}
	}
	var fx effects
	for _, e := range tasks {
		fx.merge(a.reconcileLocked(e))
	}
	a.mu.Unlock()
	a.apply(ctx, s, fx)
}

// decodeTask decodes a task from the store (nil for a deletion); false
// when it does not decode, which is logged.
func (a *Agent) decodeTask(res *pbresource.Resource, deleted bool) (*pborch.Task, bool) {
	if deleted {
		return nil, true
	}
	t := &pborch.Task{}
	if err := res.GetData().UnmarshalTo(t); err != nil {
		a.log.Error("cannot decode a task; ignoring it", "task", res.GetId().GetName(), "err", err)
		return nil, false
	}
	return t, true
}

// takeLocked records what the store says of a task and returns the task
// to reconcile (nil when there is nothing to act on).
func (a *Agent) takeLocked(res *pbresource.Resource, t *pborch.Task, deleted bool) *task {
	uid := res.GetId().GetUid()
	if a.gone.has(uid) {
		// Forgotten once the store showed it stopped: anything the watch
		// still brings of it is older (or a deletion).
		if deleted {
			a.gone.remove(uid)
		}
		return nil
	}
	e := a.tasks[uid]
	if e == nil {
		if deleted || t.GetInstance() != a.cfg.Name || t.GetLastStatus() == orchestrator.StatusStopped {
			return nil
		}
		e = a.addTaskLocked(res.GetId().GetTenancy().GetNamespace(), res.GetId().GetName(), res.GetId().GetUid())
	}
	switch {
	case deleted:
		e.deleted = true
		e.stored = nil
	case !e.seen || res.GetGeneration() >= e.res.GetGeneration():
		// Never go back to an older generation: a write's answer can come
		// before the watch delivers what preceded it.
		e.res, e.stored, e.seen = res, t, true
	}
	return e
}

func (a *Agent) addTaskLocked(ns, name, uid string) *task {
	e := &task{uid: uid, namespace: ns, name: name}
	a.tasks[uid] = e
	a.byName[e.key()] = e
	a.broadcastLocked()
	return e
}

// reconcileLocked decides what to do about e and makes the state changes
// of that decision; it returns the I/O to do. Called with a.mu held.
func (a *Agent) reconcileLocked(e *task) effects {
	var fx effects
	if e.forgotten {
		return fx
	}
	if !e.seen && !e.deleted {
		return fx // resumed from local state; the store has not spoken yet
	}
	var stored *pborch.Task
	if !e.deleted {
		stored = e.stored
	}
	mine := reportOf(e.snap, a.session)
	reported := e.written >= e.seq && (stored == nil || orchestrator.SameReport(stored, mine) || e.repairs >= maxRepairs)
	waiting := e.phase == phaseIdle && stored.GetDesiredStatus() == orchestrator.StatusRunning &&
		stored.GetLastStatus() == orchestrator.StatusPending && a.predecessorLocked(e) != nil
	d := decide(situation{stored: stored, phase: e.phase, reported: reported, leaving: a.leaving, waiting: waiting})
	if d.silent && !e.silent {
		e.silent = true
		fx.persist = append(fx.persist, e)
	}
	switch {
	case d.start:
		e.phase = phaseStarting
		fx.start = append(fx.start, e)
	case d.stop != "":
		fx.merge(a.stopLocked(e, d.stop))
	case d.finish != "":
		e.phase = phaseDone
		e.changed(finishedSnapshot(e.snap, d.finish, a.clock.Now()))
		a.log.Info("task stops without running here", "task", e.key(), "reason", d.finish)
	case d.forget:
		a.forgetLocked(e)
		fx.forget = append(fx.forget, e)
		return fx
	default:
		// Nothing to decide: repair the store if it no longer carries the
		// report (the servers marked the task lost, a new session began).
		if e.hasReport && !e.silent && stored != nil && e.written >= e.seq && !orchestrator.SameReport(stored, mine) && e.repairs < maxRepairs {
			e.repairs++
			e.seq++
			a.log.Info("the store differs from the agent's report; reporting again", "task", e.key(), "stored", stored.GetLastStatus(), "report", mine.GetLastStatus())
		}
	}
	if e.dirty() {
		fx.signal = true
	}
	a.broadcastLocked()
	return fx
}

// stopLocked asks a starting or running task to stop.
func (a *Agent) stopLocked(e *task, reason string) effects {
	var fx effects
	if e.stopReason == "" {
		e.stopReason = reason
	}
	switch e.phase {
	case phaseStarting:
		// The start sees stopReason once the definition is resolved.
	case phaseRunning:
		e.phase = phaseStopping
		a.log.Info("stopping task", "task", e.key(), "reason", e.stopReason)
		if e.runner != nil {
			fx.stops = append(fx.stops, stopRequest{e.runner, e.stopReason})
		}
		fx.persist = append(fx.persist, e)
	}
	return fx
}

// forgetLocked drops a task the agent is done with; it stays among the
// finished (for its logs and metadata) if it ran here.
func (a *Agent) forgetLocked(e *task) {
	e.forgotten = true
	delete(a.tasks, e.uid)
	a.broadcastLocked()
	if !e.deleted {
		a.gone.add(e.uid)
	}
	if !e.started {
		a.dropNamesLocked(e)
		return
	}
	a.finished = append(a.finished, e)
	if len(a.finished) > finishedKept {
		old := a.finished[0]
		a.finished = a.finished[1:]
		a.dropNamesLocked(old)
		go func() {
			if err := os.RemoveAll(taskDir(a.cfg.DataDir, old.uid)); err != nil {
				a.log.Warn("cannot remove a finished task's directory", "task", old.key(), "err", err)
			}
		}()
	}
}

func (a *Agent) dropNamesLocked(e *task) {
	if a.byName[e.key()] == e {
		delete(a.byName, e.key())
	}
	if e.token != "" && a.tokens[e.token] == e {
		delete(a.tokens, e.token)
	}
}

// resync reconciles every task again: at the start of a session, so that
// starts a lost session cut short are tried again, and when the agent
// registers a new session. A new session also renews each task's
// allowance of repairs: the servers mark an instance's tasks LOST each
// time they find it down, and an agent that flapped used up its repairs
// re-reporting into a down instance; without a fresh allowance its
// running tasks stayed LOST in the store for good.
func (a *Agent) resync(ctx context.Context, s *session) {
	a.mu.Lock()
	var fx effects
	for _, e := range a.tasks {
		e.repairs = 0
		fx.merge(a.reconcileLocked(e))
	}
	a.mu.Unlock()
	a.apply(ctx, s, fx)
}

// sweep treats every task that a fresh listing did not show as deleted.
func (a *Agent) sweep(ctx context.Context, s *session, seen map[string]bool) {
	a.mu.Lock()
	var fx effects
	a.gone.keepOnly(seen)
	for uid, e := range a.tasks {
		if !seen[uid] {
			e.deleted = true
			e.stored = nil
			fx.merge(a.reconcileLocked(e))
		}
	}
	a.mu.Unlock()
	a.apply(ctx, s, fx)
}

// uidSet is a bounded set of task uids, oldest dropped first.
type uidSet struct {
	set   map[string]bool
	order []string
	limit int
}

func newUIDSet(limit int) uidSet { return uidSet{set: make(map[string]bool), limit: limit} }

func (s *uidSet) has(uid string) bool { return s.set[uid] }

func (s *uidSet) add(uid string) {
	if s.set[uid] {
		return
	}
	s.set[uid] = true
	s.order = append(s.order, uid)
	for len(s.order) > s.limit {
		delete(s.set, s.order[0])
		s.order = s.order[1:]
	}
}

func (s *uidSet) remove(uid string) { delete(s.set, uid) }

// keepOnly drops the uids not in keep (a fresh listing: the others were
// deleted).
func (s *uidSet) keepOnly(keep map[string]bool) {
	order := s.order[:0]
	for _, uid := range s.order {
		if s.set[uid] && keep[uid] {
			order = append(order, uid)
		} else {
			delete(s.set, uid)
		}
	}
	s.order = order
}
