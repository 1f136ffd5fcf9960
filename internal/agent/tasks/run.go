package tasks

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/orchestrator"
)

// Running a task: resolving its definition, admitting it, making its
// runner, taking in its snapshots, and finishing it.

// start resolves a task's definition and runs it. It runs in its own
// goroutine, bound to the server session (l) it reads the definition
// through.
func (m *Manager) start(l *link, e *task) {
	ctx := l.ctx
	m.mu.Lock()
	ns, ref := e.namespace, e.stored.GetTaskDefinition()
	m.mu.Unlock()
	def, err := m.definition(ctx, l.read, ns, ref)

	m.mu.Lock()
	var fx effects
	switch {
	case err != nil && ctx.Err() != nil:
		// The session ended; the next one's resync tries again.
		if e.stopReason != "" {
			fx = m.finishLocked(e, "stopped before it started: "+e.stopReason)
		} else {
			e.phase = phaseIdle
		}
	case err != nil:
		fx = m.finishLocked(e, fmt.Sprintf("cannot start: %v", err))
	case e.stopReason != "":
		fx = m.finishLocked(e, "stopped before it started: "+e.stopReason)
	default:
		if aerr := m.admitLocked(e); aerr != nil {
			fx = m.finishLocked(e, fmt.Sprintf("refused by the agent of instance %s: %v", m.cfg.Instance, aerr))
			break
		}
		e.def = def
		e.token = newToken()
		m.tokens[e.token] = e
		e.snap = pendingSnapshot(def)
		e.phase = phaseRunning
		e.started = true
		m.broadcastLocked()
	}
	runIt := e.phase == phaseRunning
	m.mu.Unlock()
	if !runIt {
		m.apply(fx)
		return
	}
	m.log.Info("starting task", "task", e.key(), "uid", e.uid, "definition", ref)
	m.persist(e) // before anything runs: a SIGKILL from here on resumes
	m.run(e, nil)
}

// run is a task's life on this instance, in order: its network namespace,
// the components' Prestarts, its runner (with state; nil: from the
// beginning), and once the runner has returned (runnerEnded, or
// runnerFailed when it cannot run) the components' Poststops and the
// namespace's teardown. A resumed task goes the same way: what is done
// already (the namespace adopted, a Prestart completed) is not done again.
func (m *Manager) run(e *task, state json.RawMessage) {
	// A bridge task's namespace comes first: every container starts in it.
	if err := m.setupNetwork(e); err != nil {
		m.runnerFailed(e, err)
		return
	}
	m.mu.Lock()
	rc := m.runnerConfigLocked(e)
	runCtx := m.runCtx
	m.mu.Unlock()
	// The task's directory exists for the Prestarts too (a component
	// writes there what the task's containers read).
	if err := os.MkdirAll(rc.LogDir, 0o700); err != nil {
		m.runnerFailed(e, fmt.Errorf("task directory: %w", err))
		return
	}
	if err := m.prestart(e); err != nil {
		if runCtx.Err() != nil {
			return // the agent stops: its next start calls the Prestart again
		}
		m.runnerFailed(e, err)
		return
	}
	runner, err := m.cfg.NewRunner(rc)
	if err != nil {
		m.runnerFailed(e, err)
		return
	}
	m.mu.Lock()
	e.runner = runner
	e.hooks.Ran = true
	stop := e.stopReason
	m.mu.Unlock()
	m.runners.Add(1)
	go func() {
		defer m.runners.Done()
		err := runner.Run(runCtx, state)
		if runCtx.Err() != nil {
			return // detached: the agent stops, the task runs on
		}
		m.runnerEnded(e, err)
	}()
	if stop != "" {
		runner.Stop(stop)
	}
}

func (m *Manager) runnerFailed(e *task, err error) {
	m.log.Error("cannot run task", "task", e.key(), "err", err)
	if !m.poststop(e) {
		return // the agent stops: its next start calls the rest
	}
	m.teardownNetwork(e)
	m.mu.Lock()
	fx := m.finishLocked(e, fmt.Sprintf("cannot start: %v", err))
	m.mu.Unlock()
	m.apply(fx)
}

// runnerEnded: Run returned; the task has stopped.
func (m *Manager) runnerEnded(e *task, err error) {
	// Every container has exited and been released: the components clean
	// up, then the namespace goes.
	if !m.poststop(e) {
		return // the agent stops: its next start calls the rest
	}
	m.teardownNetwork(e)
	m.mu.Lock()
	reason := e.stopReason
	switch {
	case err != nil:
		reason = "the task runner failed: " + err.Error()
		m.log.Error("task runner failed", "task", e.key(), "err", err)
	case reason == "":
		reason = "the task runner ended"
	}
	fx := m.finishLocked(e, reason)
	m.log.Info("task stopped", "task", e.key(), "reason", e.snap.StopReason)
	m.mu.Unlock()
	m.apply(fx)
}

// finishLocked makes e done, STOPPED with reason unless its snapshot says
// so already, and reconciles it (a deleted task is forgotten at once).
func (m *Manager) finishLocked(e *task, reason string) effects {
	e.phase = phaseDone
	if e.snap.Status != orchestrator.StatusStopped || !e.hasReport {
		e.changed(finishedSnapshot(e.snap, reason, m.clock.Now()))
	}
	fx := m.reconcileLocked(e)
	if !e.forgotten && e.started {
		fx.persist = append(fx.persist, e)
	}
	fx.merge(m.successorsLocked(e))
	fx.signal = true
	m.broadcastLocked()
	return fx
}

// onSnapshot is the runners' Report callback.
func (m *Manager) onSnapshot(e *task, s Snapshot) {
	m.observeHealth(e, s)
	m.mu.Lock()
	if e.phase == phaseDone || e.forgotten {
		m.mu.Unlock()
		return
	}
	if s.Status == orchestrator.StatusStopped && (e.net != nil && !e.net.Released || len(poststopsDue(e.hooks)) > 0) {
		// A bridge task is STOPPED once its network is released too:
		// whoever then places a task on its address or its host ports
		// finds them free. teardownNetwork reports it. So with the
		// components' Poststops: poststop reports it.
		e.snap = s
		m.broadcastLocked()
		m.mu.Unlock()
		m.persist(e)
		return
	}
	e.changed(s)
	m.broadcastLocked()
	m.mu.Unlock()
	m.persist(e)
	m.signalReporter()
}

func (m *Manager) admitLocked(e *task) error {
	var live []Assignment
	for _, o := range m.tasks {
		if o != e && o.phase.live() && o.res != nil && !o.deleted {
			live = append(live, assignment(o))
		}
	}
	cand := assignment(e)
	if err := AdmitOneDaemonCopy(cand, live); err != nil {
		return err
	}
	if m.cfg.Admit == nil {
		return nil
	}
	return m.cfg.Admit(cand, live)
}

// AdmitOneDaemonCopy refuses a task of a daemon environment while another
// task of the same environment (and namespace) is live on the instance:
// the last line of "one and only one", whatever the servers wrote.
func AdmitOneDaemonCopy(candidate Assignment, live []Assignment) error {
	env := candidate.Task.GetEnvironment()
	if env == "" {
		return nil
	}
	ns := candidate.ID.GetTenancy().GetNamespace()
	for _, o := range live {
		if o.Task.GetEnvironment() == env && o.ID.GetTenancy().GetNamespace() == ns {
			return fmt.Errorf("refused: task %s of environment %s already runs on this instance, and a daemon runs one copy per instance", o.ID.GetName(), env)
		}
	}
	return nil
}

func assignment(e *task) Assignment {
	return Assignment{ID: e.res.GetId(), Owner: e.res.GetOwner(), Metadata: e.res.GetMetadata(), Task: e.stored}
}

func (m *Manager) runnerConfigLocked(e *task) RunnerConfig {
	dir := TaskDir(m.cfg.DataDir, e.uid)
	return RunnerConfig{
		TaskID:     e.key(),
		Namespace:  e.namespace,
		Name:       e.name,
		UID:        e.uid,
		Definition: e.def,
		Drivers:    m.cfg.Drivers,
		Env: map[string]string{
			EnvMetadataURI:   "http://" + m.cfg.LocalAddr + "/v1/metadata/" + e.token,
			EnvTaskNamespace: e.namespace,
			EnvTaskName:      e.name,
			EnvTaskUID:       e.uid,
			EnvInstance:      m.cfg.Instance,
		},
		Dir:    dir,
		LogDir: filepath.Join(dir, "logs"),
		Netns:  netnsOf(e.net),
		Holder: holderOf(e.net),
		Report: func(s Snapshot) { m.onSnapshot(e, s) },
		Logger: m.log, // the lifecycle names the task in what it logs
		Clock:  m.clock,
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

// definitionKey names namespace ns's family:revision ref in Manager.defs.
func definitionKey(ns, ref string) string { return ns + "/" + ref }

// LearnDefinition keeps a task definition the task stream carried, so
// that a start need not read it.
func (m *Manager) LearnDefinition(res *pbresource.Resource) {
	def := &pborch.TaskDefinition{}
	if err := res.GetData().UnmarshalTo(def); err != nil {
		m.log.Warn("cannot decode a task definition from the task stream; ignoring it", "definition", res.GetId().GetName(), "err", err)
		return
	}
	key := definitionKey(res.GetId().GetTenancy().GetNamespace(), orchestrator.TaskDefinitionRef(def.GetFamily(), def.GetRevision()))
	m.mu.Lock()
	m.defs[key] = def
	m.mu.Unlock()
}

// definition resolves ns's family:revision, once per agent (definitions
// are immutable): from what the task stream carried, or read through the
// server session.
func (m *Manager) definition(ctx context.Context, read DefinitionReader, ns, ref string) (*pborch.TaskDefinition, error) {
	key := definitionKey(ns, ref)
	m.mu.Lock()
	def, ok := m.defs[key]
	m.mu.Unlock()
	if ok {
		return def, nil
	}
	def, err := read(ctx, ns, ref)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.defs[key] = def
	m.mu.Unlock()
	return def, nil
}
