package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"trellis.dev/trellis/internal/agent"
	"trellis.dev/trellis/internal/agent/taskrunner"
	"trellis.dev/trellis/internal/agent/tasks"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/devrun"
	"trellis.dev/trellis/internal/dns"
	"trellis.dev/trellis/internal/driver"
	"trellis.dev/trellis/internal/server"
	"trellis.dev/trellis/internal/tasknet"
)

// devLeaveTimeout is how long `trellis dev` waits at least, on Ctrl-C, for
// its agents to stop their tasks before it kills them; longer when a
// task's stop timeout is (leaveDeadline).
const devLeaveTimeout = 45 * time.Second

// devKillTimeout bounds the wait for tasks killed with SIGKILL (a second
// Ctrl-C) to be reported stopped, and is the grace past a task's stop
// timeout for its runner's own SIGKILL and report.
const devKillTimeout = 15 * time.Second

// devWaitNote is how long a task may take to stop before dev says which
// one it waits for.
const devWaitNote = 2 * time.Second

// devAgents are the local agents of `trellis dev`: instances dev-1 ...
// dev-N, each with its own data dir and a distinct zone attribute, all in
// this process and all talking to the dev server over its gRPC API.
type devAgents struct {
	agents  []*agent.Agent
	drivers []map[string]driver.Driver
	// run holds the agents' data dirs when they keep nothing (no
	// -data-dir): it is removed at the end, and their tasks are tied to
	// this process (package devrun).
	run  *devrun.Run
	wg   sync.WaitGroup
	errs chan error
}

// devInstanceName names the i-th (from 1) local instance.
func devInstanceName(i int) string { return fmt.Sprintf("dev-%d", i) }

// newDevAgents makes the agents, their data under dataDir/agents, or in
// run (in memory: dataDir is empty).
func newDevAgents(n int, s *server.Server, dataDir string, run *devrun.Run, network *agent.NetworkConfig, log *slog.Logger) (*devAgents, error) {
	d := &devAgents{run: run, errs: make(chan error, n)}
	base := filepath.Join(dataDir, "agents")
	if run != nil {
		base = run.Dir()
	}
	// Mesh tasks get the sidecar proxy: this binary's trellis proxy.
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("the executable, which mesh tasks' proxies run: %w", err)
	}
	for i := 1; i <= n; i++ {
		name := devInstanceName(i)
		cfg := agent.Config{
			Servers:    []string{s.GRPCAddr()},
			DataDir:    filepath.Join(base, name),
			Name:       name,
			Cluster:    "default",
			Attributes: map[string]string{"zone": fmt.Sprintf("zone-%d", i)},
			HTTPAddr:   "127.0.0.1:0",
			Logger:     log.With("agent", name),
			NewRunner:  taskrunner.WithProxy(exe, base),
		}
		if network != nil {
			// One bridge for all, each agent leasing from its own part of
			// the subnet: host-local keeps an agent's leases in its data
			// dir, where no other agent looks.
			c := *network
			var err error
			if c.RangeStart, c.RangeEnd, err = tasknet.SplitRange(c.Subnet, i-1, n); err != nil {
				return nil, cli.Usage(err)
			}
			cfg.Network = &c
			// Each agent answers DNS in its bridge tasks' namespaces; on
			// the host it listens on a loopback port of its own (the
			// server has -dns-addr), so that the agents do not clash.
			cfg.Components = append(agent.DefaultComponents(), dns.NewAgentComponent("127.0.0.1:0", 0).Make)
		}
		drivers, err := agentDrivers(cfg, run)
		if err != nil {
			return nil, fmt.Errorf("agent %s: %w", name, err)
		}
		cfg.Drivers = drivers
		a, err := agent.New(cfg)
		if err != nil {
			return nil, fmt.Errorf("agent %s: %w", name, err)
		}
		if c, ok := a.Network(); ok && run != nil {
			if err := run.RecordNetwork(name, c); err != nil {
				return nil, fmt.Errorf("agent %s: %w", name, err)
			}
		}
		d.agents = append(d.agents, a)
		d.drivers = append(d.drivers, drivers)
	}
	return d, nil
}

// start runs every agent until ctx ends (or it leaves).
func (d *devAgents) start(ctx context.Context) {
	for _, a := range d.agents {
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			if err := a.Start(ctx); err != nil && !errors.Is(err, context.Canceled) {
				d.errs <- err
			}
		}()
	}
}

// waitConnected waits until every agent is registered and heard by the
// server, or ctx ends; it returns the names of those that are not.
func (d *devAgents) waitConnected(ctx context.Context) (waiting []string) {
	for i, a := range d.agents {
		if a.WaitConnected(ctx) != nil {
			waiting = append(waiting, devInstanceName(i+1))
		}
	}
	return waiting
}

// stop ends the agents. In memory they first leave: their tasks are
// stopped, since nothing will remember them, and dev says which task it
// waits for; kill (a second Ctrl-C) or the tasks' stop timeouts passing
// kill what still runs. With a data dir they just stop, and the next `trellis dev`
// re-attaches to their tasks.
func (d *devAgents) stop(cancel context.CancelFunc, kill <-chan string, out io.Writer, log *slog.Logger) {
	if d.run != nil {
		d.leave(kill, out, log)
	}
	cancel()
	d.wg.Wait()
}

// leave has every agent leave; see stop. It waits as long as the tasks'
// stop timeouts say (at least devLeaveTimeout), then kills what still
// runs; so does a second signal: kill brings what to say about it.
func (d *devAgents) leave(kill <-chan string, out io.Writer, log *slog.Logger) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	left := make(chan struct{})
	go func() {
		defer close(left)
		var wg sync.WaitGroup
		for _, a := range d.agents {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := a.Leave(ctx); err != nil {
					log.Warn("agent did not leave cleanly", "err", err)
				}
			}()
		}
		wg.Wait()
	}()
	began := time.Now()
	tick := time.NewTicker(devWaitNote / 2)
	defer tick.Stop()
	noted := map[string]bool{}
wait:
	for {
		select {
		case <-left:
			return
		case note := <-kill:
			fmt.Fprintln(out, note)
			break wait
		case now := <-tick.C:
			stopping := d.stopping()
			noteWaits(out, stopping, noted, now)
			if now.After(leaveDeadline(began, stopping)) {
				fmt.Fprintln(out, "Tasks still run past their stop timeouts: killing them (SIGKILL).")
				break wait
			}
		}
	}
	d.killAll(log)
	select {
	case <-left:
	case <-time.After(devKillTimeout):
		log.Warn("the agents did not finish leaving; what they ran is killed as dev exits, and the next trellis dev removes what is left")
	}
}

// stopping lists the tasks every agent waits for.
func (d *devAgents) stopping() []tasks.StoppingTask {
	var out []tasks.StoppingTask
	for _, a := range d.agents {
		out = append(out, a.Stopping()...)
	}
	return out
}

// leaveDeadline is when dev stops waiting for its tasks to stop and kills
// them: devLeaveTimeout after it began, or later if a task's stop timeout
// says so (the runner's own SIGKILL then ends it, and its report needs a
// moment).
func leaveDeadline(began time.Time, stopping []tasks.StoppingTask) time.Time {
	limit := began.Add(devLeaveTimeout)
	for _, t := range stopping {
		if t.Since.IsZero() {
			continue
		}
		if end := t.Since.Add(t.Timeout + devKillTimeout); end.After(limit) {
			limit = end
		}
	}
	return limit
}

// noteWaits says, once per task, which task dev waits for and for how long
// at most, when it takes longer than devWaitNote to stop.
func noteWaits(out io.Writer, stopping []tasks.StoppingTask, noted map[string]bool, now time.Time) {
	for _, t := range stopping {
		if noted[t.Task] || t.Since.IsZero() || now.Sub(t.Since) < devWaitNote {
			continue
		}
		noted[t.Task] = true
		fmt.Fprintf(out, "Waiting for task %s to stop (containers %v): up to %v after its SIGTERM (its stop timeout), %v left. Press Ctrl-C again to kill it now.\n",
			t.Task, t.Containers, t.Timeout, max(0, t.Timeout-now.Sub(t.Since)).Round(time.Second))
	}
}

// killer is a driver that can kill everything it runs (exec, docker).
type killer interface {
	KillAll(ctx context.Context) error
}

// killAll kills every task container of every agent; the agents see them
// exit and finish their leave.
func (d *devAgents) killAll(log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), devKillTimeout)
	defer cancel()
	for _, drivers := range d.drivers {
		for name, drv := range drivers {
			if k, ok := drv.(killer); ok {
				if err := k.KillAll(ctx); err != nil && !errors.Is(err, driver.ErrUnavailable) {
					log.Warn("cannot kill the tasks of a driver", "driver", name, "err", err)
				}
			}
		}
	}
}
