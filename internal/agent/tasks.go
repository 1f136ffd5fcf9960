package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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

func (t *task) record() *record {
	def, _ := encodeDefinition(t.def)
	res, _ := encodeResource(t.res)
	return &record{
		Namespace:  t.namespace,
		Name:       t.name,
		UID:        t.uid,
		Resource:   res,
		Definition: def,
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
	for _, t := range fx.persist {
		a.persist(t)
	}
	for _, t := range fx.forget {
		a.removeRecord(t)
	}
	if fx.signal {
		a.signalReporter()
	}
	for _, t := range fx.start {
		if s == nil {
			a.mu.Lock()
			t.phase = phaseIdle
			a.mu.Unlock()
			continue
		}
		s.starts.Add(1)
		go func() {
			defer s.starts.Done()
			a.start(ctx, s, t)
		}()
	}
}

// observe takes in a task as the store has it (or its deletion) and acts
// on it.
func (a *Agent) observe(ctx context.Context, s *session, res *pbresource.Resource, deleted bool) {
	var t *pborch.Task
	if !deleted {
		t = &pborch.Task{}
		if err := res.GetData().UnmarshalTo(t); err != nil {
			a.log.Error("cannot decode a task; ignoring it", "task", res.GetId().GetName(), "err", err)
			return
		}
	}
	a.mu.Lock()
	uid := res.GetId().GetUid()
	if a.gone.has(uid) {
		// Forgotten once the store showed it stopped: anything the watch
		// still brings of it is older (or a deletion).
		if deleted {
			a.gone.remove(uid)
		}
		a.mu.Unlock()
		return
	}
	e := a.tasks[uid]
	if e == nil {
		if deleted || t.GetInstance() != a.cfg.Name || t.GetLastStatus() == orchestrator.StatusStopped {
			a.mu.Unlock()
			return
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
	fx := a.reconcileLocked(e)
	a.mu.Unlock()
	a.apply(ctx, s, fx)
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
	reported := e.written >= e.seq && (stored == nil || sameReport(stored, mine) || e.repairs >= maxRepairs)
	d := decide(situation{stored: stored, phase: e.phase, reported: reported, leaving: a.leaving})
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
		if e.hasReport && !e.silent && stored != nil && e.written >= e.seq && !sameReport(stored, mine) && e.repairs < maxRepairs {
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

// start resolves a task's definition and runs it. It runs in its own
// goroutine, bound to the session whose client it uses.
func (a *Agent) start(ctx context.Context, s *session, e *task) {
	a.mu.Lock()
	ns, ref := e.namespace, e.stored.GetTaskDefinition()
	a.mu.Unlock()
	def, err := a.definition(ctx, s, ns, ref)

	a.mu.Lock()
	var fx effects
	switch {
	case err != nil && ctx.Err() != nil:
		// The session ended; the next one's resync tries again.
		if e.stopReason != "" {
			fx = a.finishLocked(e, "stopped before it started: "+e.stopReason)
		} else {
			e.phase = phaseIdle
		}
	case err != nil:
		fx = a.finishLocked(e, fmt.Sprintf("cannot start: %v", err))
	case e.stopReason != "":
		fx = a.finishLocked(e, "stopped before it started: "+e.stopReason)
	default:
		if aerr := a.admitLocked(e); aerr != nil {
			fx = a.finishLocked(e, fmt.Sprintf("refused by the agent of instance %s: %v", a.cfg.Name, aerr))
			break
		}
		e.def = def
		e.token = newToken()
		a.tokens[e.token] = e
		e.snap = pendingSnapshot(def)
		e.phase = phaseRunning
		e.started = true
		a.broadcastLocked()
	}
	runIt := e.phase == phaseRunning
	a.mu.Unlock()
	if !runIt {
		a.apply(ctx, s, fx)
		return
	}
	a.log.Info("starting task", "task", e.key(), "uid", e.uid, "definition", ref)
	a.persist(e) // before anything runs: a SIGKILL from here on resumes
	a.run(e, nil)
}

// run makes the task's runner and runs it with state (nil: from the
// beginning).
func (a *Agent) run(e *task, state json.RawMessage) {
	a.mu.Lock()
	rc := a.runnerConfigLocked(e)
	a.mu.Unlock()
	if err := os.MkdirAll(rc.LogDir, 0o700); err != nil {
		a.runnerFailed(e, fmt.Errorf("task directory: %w", err))
		return
	}
	runner, err := a.cfg.NewRunner(rc)
	if err != nil {
		a.runnerFailed(e, err)
		return
	}
	a.mu.Lock()
	e.runner = runner
	stop := e.stopReason
	a.mu.Unlock()
	a.runners.Add(1)
	go func() {
		defer a.runners.Done()
		err := runner.Run(a.runCtx, state)
		if a.runCtx.Err() != nil {
			return // detached: the agent stops, the task runs on
		}
		a.runnerEnded(e, err)
	}()
	if stop != "" {
		runner.Stop(stop)
	}
}

func (a *Agent) runnerFailed(e *task, err error) {
	a.log.Error("cannot run task", "task", e.key(), "err", err)
	a.mu.Lock()
	fx := a.finishLocked(e, fmt.Sprintf("cannot start: %v", err))
	a.mu.Unlock()
	a.apply(a.runCtx, nil, fx)
}

// runnerEnded: Run returned; the task has stopped.
func (a *Agent) runnerEnded(e *task, err error) {
	a.mu.Lock()
	reason := e.stopReason
	switch {
	case err != nil:
		reason = "the task runner failed: " + err.Error()
		a.log.Error("task runner failed", "task", e.key(), "err", err)
	case reason == "":
		reason = "the task runner ended"
	}
	fx := a.finishLocked(e, reason)
	a.mu.Unlock()
	a.log.Info("task stopped", "task", e.key(), "reason", e.snap.StopReason)
	a.apply(a.runCtx, nil, fx)
}

// finishLocked makes e done, STOPPED with reason unless its snapshot says
// so already, and reconciles it (a deleted task is forgotten at once).
func (a *Agent) finishLocked(e *task, reason string) effects {
	e.phase = phaseDone
	if e.snap.Status != orchestrator.StatusStopped || !e.hasReport {
		e.changed(finishedSnapshot(e.snap, reason, a.clock.Now()))
	}
	fx := a.reconcileLocked(e)
	if !e.forgotten && e.started {
		fx.persist = append(fx.persist, e)
	}
	fx.signal = true
	a.broadcastLocked()
	return fx
}

// onSnapshot is the runners' Report callback.
func (a *Agent) onSnapshot(e *task, s Snapshot) {
	a.mu.Lock()
	if e.phase == phaseDone || e.forgotten {
		a.mu.Unlock()
		return
	}
	e.changed(s)
	a.broadcastLocked()
	a.mu.Unlock()
	a.persist(e)
	a.signalReporter()
}

func (a *Agent) admitLocked(e *task) error {
	if a.cfg.Admit == nil {
		return nil
	}
	var live []Assignment
	for _, o := range a.tasks {
		if o != e && o.phase.live() && o.res != nil && !o.deleted {
			live = append(live, assignment(o))
		}
	}
	return a.cfg.Admit(assignment(e), live)
}

func assignment(e *task) Assignment {
	return Assignment{ID: e.res.GetId(), Owner: e.res.GetOwner(), Metadata: e.res.GetMetadata(), Task: e.stored}
}

func (a *Agent) runnerConfigLocked(e *task) RunnerConfig {
	dir := taskDir(a.cfg.DataDir, e.uid)
	return RunnerConfig{
		TaskID:     e.key(),
		Namespace:  e.namespace,
		Name:       e.name,
		UID:        e.uid,
		Definition: e.def,
		Drivers:    a.cfg.Drivers,
		Env: map[string]string{
			EnvMetadataURI:   "http://" + a.localAddr + "/v1/metadata/" + e.token,
			EnvTaskNamespace: e.namespace,
			EnvTaskName:      e.name,
			EnvTaskUID:       e.uid,
			EnvInstance:      a.cfg.Name,
		},
		Dir:    dir,
		LogDir: filepath.Join(dir, "logs"),
		Report: func(s Snapshot) { a.onSnapshot(e, s) },
		Logger: a.log.With("task", e.key()),
		Clock:  a.clock,
	}
}

// The environment every container gets.
const (
	EnvMetadataURI   = "TRELLIS_TASK_METADATA_URI"
	EnvTaskNamespace = "TRELLIS_TASK_NAMESPACE"
	EnvTaskName      = "TRELLIS_TASK_NAME"
	EnvTaskUID       = "TRELLIS_TASK_UID"
	EnvInstance      = "TRELLIS_INSTANCE"
)

func newToken() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// persist writes e's record (the latest state each time; persistMu keeps
// the writes in order).
func (a *Agent) persist(e *task) {
	e.persistMu.Lock()
	defer e.persistMu.Unlock()
	a.mu.Lock()
	if e.forgotten || !e.started {
		a.mu.Unlock()
		return
	}
	r := e.record()
	a.mu.Unlock()
	if err := a.state.saveRecord(r); err != nil {
		a.log.Error("cannot save the task's local state", "task", e.key(), "err", err)
	}
}

func (a *Agent) removeRecord(e *task) {
	e.persistMu.Lock()
	defer e.persistMu.Unlock()
	if err := os.Remove(a.state.recordPath(e.uid)); err != nil && !errors.Is(err, os.ErrNotExist) {
		a.log.Warn("cannot remove the task's local state", "task", e.key(), "err", err)
	}
	if !e.started {
		_ = os.RemoveAll(taskDir(a.cfg.DataDir, e.uid))
	}
}

// resume takes on the tasks of the local state: those still running are
// re-attached through their runners, those done are reported.
func (a *Agent) resume() {
	records, errs := a.state.loadRecords()
	for _, err := range errs {
		a.log.Error("cannot read a task's local state; leaving the file as it is", "err", err)
	}
	keep := make(map[string]bool, len(records))
	var toRun []*task
	var states []json.RawMessage
	a.mu.Lock()
	for _, r := range records {
		keep[r.UID] = true
		def, err := r.definition()
		if err != nil {
			a.log.Error("cannot read a task's local state; leaving the file as it is", "task", r.Namespace+"/"+r.Name, "err", err)
			continue
		}
		e := a.addTaskLocked(r.Namespace, r.Name, r.UID)
		e.def, e.token, e.started = def, r.Token, true
		if res, err := r.resource(); err == nil {
			e.res = res
			e.stored = &pborch.Task{}
			_ = res.GetData().UnmarshalTo(e.stored)
		}
		e.stopReason, e.silent = r.StopReason, r.Silent
		e.snap = r.Snapshot
		e.hasReport = r.Snapshot.Status != ""
		e.seq = 1 // this session has reported nothing yet
		if e.token != "" {
			a.tokens[e.token] = e
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
	a.mu.Unlock()
	a.state.removeOrphans(keep)
	for i, e := range toRun {
		a.log.Info("resuming task", "task", e.key(), "uid", e.uid)
		a.run(e, states[i])
	}
}

// resync reconciles every task again: at the start of a session, so that
// starts a lost session cut short are tried again.
func (a *Agent) resync(ctx context.Context, s *session) {
	a.mu.Lock()
	var fx effects
	for _, e := range a.tasks {
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

// definition resolves ns's family:revision, once per agent (definitions
// are immutable). Errors other than NotFound are retried until ctx ends.
func (a *Agent) definition(ctx context.Context, s *session, ns, ref string) (*pborch.TaskDefinition, error) {
	key := ns + "/" + ref
	a.mu.Lock()
	def, ok := a.defs[key]
	a.mu.Unlock()
	if ok {
		return def, nil
	}
	family, rev, err := orchestrator.ParseTaskDefinitionRef(ref)
	if err != nil {
		return nil, err
	}
	id := orchestrator.TaskDefinitionID(ns, family, rev)
	for failures := 1; ; failures++ {
		rctx, cancel := context.WithTimeout(ctx, a.cfg.RPCTimeout)
		resp, err := s.res.Read(rctx, &pbresource.ReadRequest{Id: id})
		cancel()
		if err == nil {
			def := &pborch.TaskDefinition{}
			if err := resp.GetResource().GetData().UnmarshalTo(def); err != nil {
				return nil, fmt.Errorf("task definition %s: %w", ref, err)
			}
			a.mu.Lock()
			a.defs[key] = def
			a.mu.Unlock()
			return def, nil
		}
		switch status.Code(err) {
		case codes.NotFound:
			return nil, fmt.Errorf("task definition %s not found in namespace %s", ref, ns)
		case codes.PermissionDenied, codes.InvalidArgument:
			return nil, fmt.Errorf("task definition %s: %s", ref, status.Convert(err).Message())
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-a.clock.After(backoff(a.cfg.BackoffMin, a.cfg.BackoffMax, failures, randFloat())):
		}
	}
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
