package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/orchestrator"
)

// Running a task: resolving its definition, admitting it, making its
// runner, taking in its snapshots, and finishing it.

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
	a.log.Info("task stopped", "task", e.key(), "reason", e.snap.StopReason)
	a.mu.Unlock()
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
	fx.merge(a.successorsLocked(e))
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
	var live []Assignment
	for _, o := range a.tasks {
		if o != e && o.phase.live() && o.res != nil && !o.deleted {
			live = append(live, assignment(o))
		}
	}
	cand := assignment(e)
	if err := AdmitOneDaemonCopy(cand, live); err != nil {
		return err
	}
	if a.cfg.Admit == nil {
		return nil
	}
	return a.cfg.Admit(cand, live)
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
		Logger: a.log, // the lifecycle names the task in what it logs
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

// definitionKey names namespace ns's family:revision ref in Agent.defs.
func definitionKey(ns, ref string) string { return ns + "/" + ref }

// learnDefinition keeps a task definition the task stream carried, so
// that definition need not read it.
func (a *Agent) learnDefinition(res *pbresource.Resource) {
	def := &pborch.TaskDefinition{}
	if err := res.GetData().UnmarshalTo(def); err != nil {
		a.log.Warn("cannot decode a task definition from the task stream; ignoring it", "definition", res.GetId().GetName(), "err", err)
		return
	}
	key := definitionKey(res.GetId().GetTenancy().GetNamespace(), orchestrator.TaskDefinitionRef(def.GetFamily(), def.GetRevision()))
	a.mu.Lock()
	a.defs[key] = def
	a.mu.Unlock()
}

// definition resolves ns's family:revision, once per agent (definitions
// are immutable): from what the task stream carried, or read. Errors other than NotFound are retried until ctx ends.
func (a *Agent) definition(ctx context.Context, s *session, ns, ref string) (*pborch.TaskDefinition, error) {
	key := definitionKey(ns, ref)
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
		// From the leader: a server behind it may not have the
		// definition yet, and NotFound fails the task.
		resp, err := s.res.Read(rctx, &pbresource.ReadRequest{Id: id, Consistent: true})
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
		case <-a.clock.After(retryDelay(a.cfg.BackoffMin, a.cfg.BackoffMax, failures, randFloat())):
		}
	}
}
