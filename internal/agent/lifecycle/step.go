package lifecycle

import (
	"fmt"
	"syscall"
	"time"

	"trellis.dev/trellis/internal/agent/health"
	"trellis.dev/trellis/internal/driver"
)

// Step is the task lifecycle's decision: given the spec, the task's state,
// an event and the time, it returns the next state, the I/O to do and when
// to be called again. It does no I/O and reads no clock; st is not
// modified. A state that does not match the spec (see State.CheckAgainst)
// is returned unchanged.
func Step(spec TaskSpec, st State, ev Event, env Env) Decision {
	if st.CheckAgainst(spec) != nil {
		return Decision{State: st}
	}
	s := &step{spec: spec, env: env, st: st.Clone()}
	s.apply(ev)
	s.reconcile()
	if !s.st.sameAs(st) {
		s.st.Version = st.Version + 1
	}
	return Decision{State: s.st, Actions: s.actions, Wake: s.wake()}
}

// step holds one Step's work in progress.
type step struct {
	spec    TaskSpec
	env     Env
	st      State
	actions []Action
}

func (s *step) now() time.Time { return s.env.Now }

func (s *step) find(name string, incarnation int) (int, *ContainerState) {
	for i := range s.st.Containers {
		c := &s.st.Containers[i]
		if c.Name == name && c.Incarnation == incarnation {
			return i, c
		}
	}
	return -1, nil
}

func (s *step) index(name string) int {
	for i, c := range s.st.Containers {
		if c.Name == name {
			return i
		}
	}
	return -1
}

func (s *step) setPhase(c *ContainerState, p Phase) {
	c.Phase = p
	c.Status = p.status()
}

func (s *step) do(a Action) { s.actions = append(s.actions, a) }

// apply folds the event into the state.
func (s *step) apply(ev Event) {
	switch ev := ev.(type) {
	case Resumed:
		s.resume()
	case Started:
		_, c := s.find(ev.Container, ev.Incarnation)
		if c == nil || c.Phase != PhaseStarting {
			return
		}
		h := ev.Handle
		c.Handle = &h
		c.Destroyed = false
		c.StartedAt = s.now()
		c.Health = health.NewTracker(s.now())
		s.setPhase(c, PhaseRunning)
	case StartFailed:
		_, c := s.find(ev.Container, ev.Incarnation)
		if c == nil || c.Phase != PhaseStarting {
			return
		}
		s.setPhase(c, PhaseExited)
		c.Reason = "failed to start: " + ev.Err
		c.FinishedAt = s.now()
		s.stop(fmt.Sprintf("container %s failed to start: %s", c.Name, ev.Err))
	case Exited:
		i, c := s.find(ev.Container, ev.Incarnation)
		if c == nil || c.Phase != PhaseRunning {
			return
		}
		s.exited(i, c, ev.Exit)
	case Probed:
		i, c := s.find(ev.Container, ev.Incarnation)
		if c == nil || c.Phase != PhaseRunning || s.spec.Containers[i].Health == nil {
			return
		}
		c.Health = c.Health.Record(*s.spec.Containers[i].Health, ev.Result, s.now())
	case StopRequested:
		reason := ev.Reason
		if reason == "" {
			reason = "stop requested"
		}
		s.stop(reason)
	}
}

// exited records a container's exit and decides what follows: nothing
// while the task stops, or for an init container that did its job; else a
// restart if the policy allows one; else, for an essential container, the
// task stops.
func (s *step) exited(i int, c *ContainerState, exit driver.Exit) {
	s.setPhase(c, PhaseExited)
	c.FinishedAt = s.now()
	code := exit.Code
	c.ExitCode = &code
	c.ExitSignal = int(exit.Signal)
	c.OOMKilled = exit.OOMKilled
	if exit.Err != nil {
		c.Reason = exit.Err.Error()
	}
	// A container that does not run has no health; the tracker starts over
	// with the next incarnation.
	c.Health = health.Tracker{Status: health.Unknown}

	if s.st.Stopping() || completedAsRequired(s.spec, i, *c) {
		return
	}
	kept, at, ok := s.spec.RestartPolicy.nextRestart(c.Restarts, s.now(), s.env.Rand)
	c.Restarts = kept
	if ok {
		c.RestartAt = at
		return
	}
	if s.spec.Containers[i].Essential {
		s.stop(fmt.Sprintf("essential container %s %s", c.Name, describeExit(*c)))
	}
}

// stop begins the task's stop; the first reason given is the one kept.
func (s *step) stop(reason string) {
	if s.st.Stopping() {
		return
	}
	s.st.DesiredStatus = TaskStopped
	s.st.StopReason = reason
	s.st.StoppingAt = s.now()
}

// resume fixes up a state saved by an agent that has since restarted:
// starts that were in flight are asked again, running containers are
// recovered, signals of a stop in progress are sent again (the agent may
// have died between deciding and sending), and a stopped task's containers
// are destroyed again (destroy is idempotent).
func (s *step) resume() {
	for i := range s.st.Containers {
		c := &s.st.Containers[i]
		switch c.Phase {
		case PhaseStarting:
			// The start's outcome was lost with the agent. If the driver did
			// start the container, its handle is lost too; asking again is the
			// only way forward.
			if c.StartedAt.IsZero() {
				s.setPhase(c, PhaseWaiting)
			} else {
				s.setPhase(c, PhaseExited)
				c.RestartAt = s.now()
				c.RestartCount--
			}
		case PhaseRunning:
			s.do(Action{Kind: ActRecover, Container: c.Name, Incarnation: c.Incarnation, Handle: *c.Handle})
			if !c.TermAt.IsZero() {
				s.do(s.signal(c, syscall.SIGTERM))
			}
			if c.Killed {
				s.do(s.signal(c, syscall.SIGKILL))
			}
		}
		if s.st.Status == TaskStopped && c.Handle != nil {
			s.do(Action{Kind: ActDestroy, Container: c.Name, Incarnation: c.Incarnation, Handle: *c.Handle})
			c.Destroyed = true
		}
	}
}

func (s *step) signal(c *ContainerState, sig syscall.Signal) Action {
	return Action{Kind: ActSignal, Container: c.Name, Incarnation: c.Incarnation, Handle: *c.Handle, Signal: sig}
}

// reconcile moves the task on from where apply left it, at the step's time.
func (s *step) reconcile() {
	if s.st.Status == TaskStopped {
		return
	}
	if !s.st.Stopping() {
		s.startDue()
	}
	if !s.st.Stopping() {
		s.updateRunning()
	}
	if s.st.Stopping() {
		s.sequenceStop()
	}
}

// startDue starts the restarts that are due and the containers whose
// dependencies are met, and stops the task when a dependency can never be
// met.
func (s *step) startDue() {
	for i := range s.st.Containers {
		c := &s.st.Containers[i]
		if c.Phase == PhaseExited && !c.RestartAt.IsZero() && !s.now().Before(c.RestartAt) {
			c.RestartAt = time.Time{}
			c.RestartCount++
			s.start(c)
		}
	}
	for i := range s.st.Containers {
		c := &s.st.Containers[i]
		if c.Phase != PhaseWaiting {
			continue
		}
		ready := true
		for _, d := range s.spec.Containers[i].DependsOn {
			j := s.index(d.Container)
			if j < 0 {
				continue // Validate rules this out.
			}
			dep := s.st.Containers[j]
			if unsatisfiable(d.Condition, dep) {
				s.stop(fmt.Sprintf("container %s cannot start: its dependency %s %s (condition %s)",
					c.Name, dep.Name, describeDependency(d.Condition, dep), d.Condition))
				return
			}
			ready = ready && met(d.Condition, dep, s.spec.Containers[j].Health != nil)
		}
		if ready {
			s.start(c)
		}
	}
}

// describeDependency says how a dependency that stopped for good failed its
// condition.
func describeDependency(cond Condition, dep ContainerState) string {
	d := describeExit(dep)
	if cond == CondHealthy && dep.ExitCode != nil {
		d += " before becoming HEALTHY"
	}
	return d
}

func (s *step) start(c *ContainerState) {
	a := Action{Kind: ActStart, Container: c.Name}
	if c.Handle != nil && !c.Destroyed {
		prev := *c.Handle
		a.Previous = &prev
	}
	c.Incarnation++
	a.Incarnation = c.Incarnation
	s.setPhase(c, PhaseStarting)
	c.Handle = nil
	c.Destroyed = false
	c.ExitCode = nil
	c.ExitSignal = 0
	c.OOMKilled = false
	c.Reason = ""
	c.FinishedAt = time.Time{}
	s.do(a)
}

// updateRunning makes the task RUNNING once every essential container has
// started, and stops it when nothing is left to run.
func (s *step) updateRunning() {
	if s.st.Status == TaskPending {
		all := true
		for i, c := range s.st.Containers {
			if s.spec.Containers[i].Essential && c.StartedAt.IsZero() {
				all = false
			}
		}
		if all {
			s.st.Status = TaskRunning
			s.st.StartedAt = s.now()
		}
	}
	for _, c := range s.st.Containers {
		if !terminal(c) {
			return
		}
	}
	// Only init containers that did their job and non-essential ones are
	// left, all exited for good.
	s.stop("every container has exited")
}

// sequenceStop drives a stop: SIGTERM to every container that is not a
// sidecar, and its DrainSignal to a sidecar that has one; SIGTERM to
// sidecars once no other container is up; SIGKILL to
// any container still up StopTimeout after its SIGTERM; STOPPED once none
// is up, and every container destroyed.
func (s *step) sequenceStop() {
	othersUp := false
	for i, c := range s.st.Containers {
		if !s.spec.Containers[i].Sidecar && c.Phase.up() {
			othersUp = true
		}
	}
	anyUp := false
	for i := range s.st.Containers {
		c := &s.st.Containers[i]
		cs := s.spec.Containers[i]
		switch c.Phase {
		case PhaseWaiting:
			s.setPhase(c, PhaseExited)
			c.Reason = "the task stopped before it started"
		case PhaseExited:
			c.RestartAt = time.Time{}
		case PhaseStarting:
			// Signalled once the driver says it started.
			anyUp = true
		case PhaseRunning:
			anyUp = true
			if cs.Sidecar && othersUp && cs.DrainSignal != 0 && c.DrainAt.IsZero() && c.TermAt.IsZero() {
				c.DrainAt = s.now()
				s.do(s.signal(c, cs.DrainSignal))
			}
			if c.TermAt.IsZero() && (!cs.Sidecar || !othersUp) {
				c.TermAt = s.now()
				s.do(s.signal(c, syscall.SIGTERM))
			}
			if !c.TermAt.IsZero() && !c.Killed && !s.now().Before(c.TermAt.Add(cs.stopTimeout())) {
				c.Killed = true
				s.do(s.signal(c, syscall.SIGKILL))
			}
		}
	}
	if anyUp {
		return
	}
	s.st.Status = TaskStopped
	s.st.StoppedAt = s.now()
	for i := range s.st.Containers {
		c := &s.st.Containers[i]
		if c.Handle != nil && !c.Destroyed {
			c.Destroyed = true
			s.do(Action{Kind: ActDestroy, Container: c.Name, Incarnation: c.Incarnation, Handle: *c.Handle})
		}
	}
}

// wake is when a pending restart or SIGKILL falls due.
func (s *step) wake() time.Time {
	var at time.Time
	earliest := func(t time.Time) {
		if !t.IsZero() && (at.IsZero() || t.Before(at)) {
			at = t
		}
	}
	for i, c := range s.st.Containers {
		switch {
		case !s.st.Stopping() && c.Phase == PhaseExited:
			earliest(c.RestartAt)
		case s.st.Stopping() && c.Phase == PhaseRunning && !c.TermAt.IsZero() && !c.Killed:
			earliest(c.TermAt.Add(s.spec.Containers[i].stopTimeout()))
		}
	}
	return at
}
