package tasks

import (
	"encoding/json"
	"sync"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/agent/component"
	"trellis.dev/trellis/internal/orchestrator"
)

// task is one task the agent knows: from the store (placed on this
// instance), from its local state, or both. Fields are guarded by Manager.mu
// unless said otherwise.
type task struct {
	uid, namespace, name string

	// res is the task as last seen in the store, stored its data and
	// status what it says of the task (its status["agent"], the last
	// report stored); seen says the store has shown it since the agent
	// started (a task resumed from local state has the res it was started
	// with until then). deleted: the store no longer has it.
	res     *pbresource.Resource
	stored  *pborch.Task
	status  *pborch.TaskStatus
	seen    bool
	deleted bool

	// The encodings record() last made of def (immutable) and of res (as
	// of resJSONOf): a task is saved at every change of its state, and
	// re-encoding both each time was a sizeable part of the agent's CPU
	// per task.
	defJSON   json.RawMessage
	resJSON   json.RawMessage
	resJSONOf *pbresource.Resource

	phase phase
	def   *pborch.TaskDefinition
	// net is a bridge task's network (nil before it is set up, and for
	// host tasks).
	net *taskNetwork
	// hooks is where the task is with the components' hooks (hooks.go).
	hooks hookProgress
	// health is the last TaskHealth given to the components that observe
	// it (health.go); set only on the runner's report path.
	health *component.TaskHealth
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

// MaxRepairs bounds the re-reports of one task made because the store
// differed from its report, between two changes of its state or sessions
// (see task.repairs).
const MaxRepairs = 3

func (t *task) key() string { return t.namespace + "/" + t.name }

// dirty: a report is waiting to be written.
func (t *task) dirty() bool {
	return t.hasReport && !t.silent && t.written < t.seq && t.seen && !t.deleted && !t.stopHeld()
}

// stopHeld: the runner has reported the task STOPPED, and the report
// waits for the components' Poststops and the network's release
// (onSnapshot). Nothing is written meanwhile: a report still pending from
// before (the task stopping) would carry the STOPPED snapshot early.
func (t *task) stopHeld() bool {
	return t.snap.Status == orchestrator.StatusStopped && t.phase != phaseDone &&
		(t.net != nil && !t.net.Released || len(poststopsDue(t.hooks)) > 0)
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
		Network:    t.net,
		Hooks:      hooksRecord(t.hooks),
	}
}

// hooksRecord is what a record keeps of p (a copy: records are encoded
// outside the agent's lock); nil when there is nothing to keep.
func hooksRecord(p hookProgress) *hookProgress {
	if p.empty() {
		return nil
	}
	c := p.clone()
	return &c
}

// effects are what a change under m.mu asks to be done once it is
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
