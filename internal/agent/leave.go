package agent

import (
	"context"
	"errors"

	"google.golang.org/protobuf/proto"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/orchestrator"
)

// Leave takes the instance out of the cluster gracefully: it stops every
// task (each with its stop timeout), waits until the store has their
// STOPPED reports, marks the Instance left and ends Start. It returns
// when that is done, or when ctx ends (the leave goes on).
func (a *Agent) Leave(ctx context.Context) error {
	if !a.started.Load() {
		return errors.New("agent: Leave before Start")
	}
	a.leaveOnce.Do(func() { go a.leave() })
	select {
	case <-a.leaveDone:
		return a.leaveErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (a *Agent) leave() {
	defer close(a.leaveDone)
	ctx := a.runCtx
	a.log.Info("leaving the cluster: stopping every task")
	a.mu.Lock()
	a.leaving = true
	var fx effects
	for _, e := range a.tasks {
		if e.phase.live() {
			fx.merge(a.stopLocked(e, reasonLeaving))
		}
	}
	a.broadcastLocked()
	a.mu.Unlock()
	a.apply(ctx, nil, fx)

	err := a.waitFor(ctx, func() bool {
		for _, e := range a.tasks {
			if e.phase.live() || !e.reportedLocked() {
				return false
			}
		}
		return true
	})
	if err == nil {
		err = a.withServer(ctx, func(s *session) error {
			return a.updateInstance(ctx, s, func(stored *pborch.Instance) (*pborch.Instance, error) {
				if stored == nil {
					return nil, nil // removed by an operator: nothing to mark
				}
				in := proto.Clone(stored).(*pborch.Instance)
				in.Status = orchestrator.InstanceLeft
				return in, nil
			})
		})
	}
	if err != nil {
		a.leaveErr = err
		a.log.Error("leave failed", "err", err)
		return
	}
	// Every task has stopped and been reported: the local state is no
	// longer needed.
	a.mu.Lock()
	var done []*task
	for _, e := range a.tasks {
		if e.phase == phaseDone {
			a.forgetLocked(e)
			done = append(done, e)
		}
	}
	a.mu.Unlock()
	for _, e := range done {
		a.removeRecord(e)
	}
	close(a.left)
}

// withServer calls fn with the live session, waiting for one and trying
// again (after a backoff) until fn succeeds or ctx ends.
func (a *Agent) withServer(ctx context.Context, fn func(*session) error) error {
	for failures := 1; ; failures++ {
		var s *session
		if err := a.waitFor(ctx, func() bool { s = a.current; return s != nil }); err != nil {
			return err
		}
		err := fn(s)
		if err == nil {
			return nil
		}
		a.log.Warn("call to the servers failed; trying again", "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-a.clock.After(retryDelay(a.cfg.BackoffMin, a.cfg.BackoffMax, failures, randFloat())):
		}
	}
}
