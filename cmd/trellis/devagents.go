package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"trellis.dev/trellis/internal/agent"
	"trellis.dev/trellis/internal/agent/taskrunner"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/server"
	"trellis.dev/trellis/internal/tasknet"
)

// devLeaveTimeout bounds how long `trellis dev` waits, on Ctrl-C, for its
// agents to stop their tasks.
const devLeaveTimeout = 45 * time.Second

// devAgents are the local agents of `trellis dev`: instances dev-1 ...
// dev-N, each with its own data dir and a distinct zone attribute, all in
// this process and all talking to the dev server over its gRPC API.
type devAgents struct {
	agents []*agent.Agent
	// tempDir is removed at the end when the agents keep nothing.
	tempDir string
	// keep: the dev server keeps its data (-data-dir), so tasks keep
	// running across a restart of dev; otherwise they are stopped.
	keep bool
	wg   sync.WaitGroup
	errs chan error
}

// devInstanceName names the i-th (from 1) local instance.
func devInstanceName(i int) string { return fmt.Sprintf("dev-%d", i) }

func newDevAgents(n int, s *server.Server, dataDir string, network *agent.NetworkConfig, log *slog.Logger) (*devAgents, error) {
	d := &devAgents{keep: dataDir != "", errs: make(chan error, n)}
	base := filepath.Join(dataDir, "agents")
	if dataDir == "" {
		dir, err := os.MkdirTemp("", "trellis-dev-*")
		if err != nil {
			return nil, fmt.Errorf("agent data dirs: %w", err)
		}
		d.tempDir, base = dir, dir
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
			NewRunner:  taskrunner.New,
		}
		if network != nil {
			// One bridge for all, each agent leasing from its own part of
			// the subnet: host-local keeps an agent's leases in its data
			// dir, where no other agent looks.
			c := *network
			var err error
			if c.RangeStart, c.RangeEnd, err = tasknet.SplitRange(c.Subnet, i-1, n); err != nil {
				d.cleanup()
				return nil, cli.Usage(err)
			}
			cfg.Network = &c
		}
		cfg.Drivers = agentDrivers(name, cfg.Logger)
		a, err := agent.New(cfg)
		if err != nil {
			d.cleanup()
			return nil, fmt.Errorf("agent %s: %w", name, err)
		}
		d.agents = append(d.agents, a)
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

// stop ends the agents: in memory, they first leave (their tasks are
// stopped, since nothing will remember them); with a data dir they just
// stop, and the next `trellis dev` re-attaches to their tasks.
func (d *devAgents) stop(cancel context.CancelFunc, log *slog.Logger) {
	if !d.keep {
		ctx, done := context.WithTimeout(context.Background(), devLeaveTimeout)
		var wg sync.WaitGroup
		for _, a := range d.agents {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := a.Leave(ctx); err != nil {
					log.Warn("agent did not leave cleanly; its tasks may still run", "err", err)
				}
			}()
		}
		wg.Wait()
		done()
	}
	cancel()
	d.wg.Wait()
	d.cleanup()
}

func (d *devAgents) cleanup() {
	if d.tempDir != "" {
		_ = os.RemoveAll(d.tempDir)
	}
}
