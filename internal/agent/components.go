package agent

import (
	"context"
	"net"
	"sync"

	"google.golang.org/grpc"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/agent/component"
	"trellis.dev/trellis/internal/agent/tasks"
	"trellis.dev/trellis/internal/storage"
)

// The agent's components (package component): made in New from the
// Config's makers, started in order before the tasks are resumed, stopped
// in reverse once the task runners have detached or ended.

// makeComponents makes the agent's components and returns their per-task
// hooks, in order, for the task manager.
func (a *Agent) makeComponents() ([]tasks.Hooks, error) {
	makers := a.cfg.Components
	if makers == nil {
		makers = DefaultComponents()
	}
	host, _, err := net.SplitHostPort(a.address)
	if err != nil {
		host = a.address
	}
	var lv component.Leaves
	if a.leaves != nil {
		lv = a.leaves
	}
	seen := make(map[string]bool, len(makers))
	var hooks []tasks.Hooks
	for i, mk := range makers {
		c, err := mk(component.Deps{
			Instance: a.cfg.Name,
			Address:  host,
			Servers:  agentServers{a},
			Informer: a.informer,
			Logger:   a.log,
			Clock:    a.cfg.Clock,

			Datacenter: a.cfg.Datacenter,
			Leaves:     lv,
		})
		if err != nil {
			return nil, configError("Components", "component %d: %v", i, err)
		}
		name := c.Name()
		switch {
		case name == "":
			return nil, configError("Components", "component %d has no name", i)
		case seen[name]:
			return nil, configError("Components", "two components are named %q: a task's record could not tell their hooks apart", name)
		}
		seen[name] = true
		if d, ok := c.(TaskDNS); ok && a.network != nil {
			a.network.dns = d
		}
		a.components = append(a.components, c)
		hooks = append(hooks, c)
	}
	return hooks, nil
}

// agentServers is the agent's session as its components and its informer
// reach the servers (the session is made after them: it needs the task
// manager, which needs the components' hooks).
type agentServers struct{ a *Agent }

func (s agentServers) Call(ctx context.Context, fn func(context.Context, grpc.ClientConnInterface) error) error {
	return s.a.session.Call(ctx, fn)
}

func (s agentServers) Watch(ctx context.Context, req *pbresource.WatchListRequest) (storage.Watch, error) {
	return s.a.session.Watch(ctx, req)
}

// startComponents starts each component's Start in order; stop ends them
// in reverse order, each waited for before the next. A component that
// fails is logged: the agent and its tasks run on without it.
func (a *Agent) startComponents(ctx context.Context) (stop func()) {
	type running struct {
		name   string
		cancel context.CancelFunc
		done   chan struct{}
	}
	var all []running
	for _, c := range a.components {
		// Not ctx's child: the components outlive the task runners, which
		// ctx detaches.
		cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		r := running{name: c.Name(), cancel: cancel, done: make(chan struct{})}
		go func() {
			defer close(r.done)
			if err := c.Start(cctx); err != nil && cctx.Err() == nil {
				a.log.Error("component failed; the agent runs on without it", "component", r.name, "err", err)
			}
		}()
		all = append(all, r)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			for i := len(all) - 1; i >= 0; i-- {
				all[i].cancel()
				<-all[i].done
			}
		})
	}
}
