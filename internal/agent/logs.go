package agent

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbagent "trellis.dev/trellis/api/agent/v1"
	"trellis.dev/trellis/internal/backoff"
	"trellis.dev/trellis/internal/driver"
	"trellis.dev/trellis/internal/orchestrator/tasklogs"
)

// The agent's side of task logs through the servers (package tasklogs):
// while it is on a server, it keeps a link there on which the server asks
// for a task's logs, and answers each ask with the output.

// onServer is what runs with each server connection: the leaf cache's
// calls and roots watch ride it (leafcache.go), and the logs' link runs
// on it, unless each is turned off.
func (a *Agent) onServer() []func(context.Context, grpc.ClientConnInterface) {
	var on []func(context.Context, grpc.ClientConnInterface)
	if a.leafServers != nil {
		on = append(on, a.leafServers.Ride)
	}
	if !a.cfg.DisableTaskLogs {
		on = append(on, a.linkLogs)
	}
	return on
}

// linkLogs keeps the logs' link on the server of cc until ctx ends (the
// agent leaves that server), linking again after a backoff when it
// breaks.
func (a *Agent) linkLogs(ctx context.Context, cc grpc.ClientConnInterface) {
	pace := backoff.Waiter{Policy: backoff.Policy{Base: a.cfg.BackoffMin, Max: a.cfg.BackoffMax}, Rand: rand.Float64}
	for {
		err := tasklogs.Serve(ctx, cc, a.cfg.Name, a.Session(), a.openLogs, a.log)
		if ctx.Err() != nil {
			return
		}
		a.log.Warn("the task logs' link to the server broke; linking again", "err", err)
		if !pace.Wait(ctx) {
			return
		}
	}
}

// openLogs opens the output a server asks for, its refusals as gRPC
// statuses.
func (a *Agent) openLogs(ctx context.Context, req *pbagent.LogRequest) (io.ReadCloser, error) {
	key := req.GetNamespace() + "/" + req.GetName()
	if uid := req.GetUid(); uid != "" {
		// The servers name the task they checked the read against: a task
		// of the same name that this agent still holds (an older one, not
		// yet forgotten) is not it.
		for _, t := range a.tasks.Tasks() {
			if t.Namespace == req.GetNamespace() && t.Name == req.GetName() && t.UID != uid {
				return nil, status.Errorf(codes.NotFound, "task %s on instance %s is another task (uid %s) than the one asked for (uid %s)", key, a.cfg.Name, t.UID, uid)
			}
		}
	}
	runner, err := a.tasks.LogRunner(req.GetNamespace(), req.GetName(), req.GetContainer())
	if err != nil {
		return nil, status.Error(codes.NotFound, err.Error())
	}
	rc, err := runner.Logs(ctx, req.GetContainer(), driver.Stream(req.GetStream()), req.GetFollow())
	switch {
	case errors.Is(err, ErrNotStarted):
		return nil, status.Errorf(codes.FailedPrecondition, "task %s: %v", key, err)
	case errors.Is(err, driver.ErrGone):
		return nil, status.Errorf(codes.NotFound, "task %s: %v", key, err)
	case err != nil:
		return nil, status.Errorf(codes.Internal, "task %s: logs: %v", key, err)
	}
	a.logReads.Add(1)
	return &countedReader{ReadCloser: rc, done: sync.OnceFunc(func() { a.logReads.Add(-1) })}, nil
}

// LogReads is the number of reads of task logs the servers have open on
// this agent.
func (a *Agent) LogReads() int64 { return a.logReads.Load() }

// countedReader counts itself out of Agent.logReads when closed.
type countedReader struct {
	io.ReadCloser
	done func()
}

func (c *countedReader) Close() error {
	err := c.ReadCloser.Close()
	c.done()
	return err
}
