package agent

import (
	"context"
	"errors"

	"trellis.dev/trellis/internal/agent/tasks"
	"trellis.dev/trellis/internal/tasknet"
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
	a.tasks.StopAll()
	err := a.tasks.WaitStopped(ctx)
	if err == nil {
		err = a.session.MarkLeft(ctx)
	}
	if err != nil {
		a.leaveErr = err
		a.log.Error("leave failed", "err", err)
		return
	}
	// Every task has stopped and been reported: the local state is no
	// longer needed.
	a.tasks.ForgetDone()
	close(a.left)
}

// Stopping lists the tasks the agent has asked to stop and that have not
// stopped yet (during a Leave: what it waits for).
func (a *Agent) Stopping() []tasks.StoppingTask { return a.tasks.Stopping() }

// Network is the agent's bridge task network configuration as it uses it
// (its state under the data dir), false when it runs no bridge tasks.
func (a *Agent) Network() (tasknet.Config, bool) {
	if a.network == nil || a.network.net == nil {
		return tasknet.Config{}, false
	}
	return a.network.net.Config(), true
}
