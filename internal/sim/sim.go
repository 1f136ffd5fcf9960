// Package sim runs a fleet of simulated instances in one process: many
// real agents (internal/agent), each registering its own Instance,
// heartbeating and watching for its tasks over gRPC against real servers,
// but running tasks through the simulated driver (internal/driver/sim)
// instead of processes. It is what `trellis sim` runs and what the
// scheduler benchmarks place on: the servers cannot tell a simulated
// instance from a real one.
package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"time"

	"trellis.dev/trellis/internal/agent"
	"trellis.dev/trellis/internal/agent/taskrunner"
	"trellis.dev/trellis/internal/driver"
	simdriver "trellis.dev/trellis/internal/driver/sim"
)

// Config says what fleet to run.
type Config struct {
	// Servers are the servers' gRPC addresses. Instance i tries them
	// starting from the i-th, so the fleet spreads over them.
	Servers []string
	// Instances is how many instances to simulate.
	Instances int
	// NamePrefix names them: <prefix>1, <prefix>2, ... (default "sim-").
	NamePrefix string
	Cluster    string
	// Attributes are given to every instance; Zones > 0 adds zone=zone-K,
	// spread round-robin over K zones.
	Attributes map[string]string
	Zones      int
	// DataDir holds the agents' state; empty means a temporary directory
	// removed at the end.
	DataDir string
	// Driver says how simulated tasks behave.
	Driver simdriver.Config
	// StartRate is how many agents start per second (default 500), so
	// that a big fleet does not register all at once.
	StartRate int
	Token     string
	Logger    *slog.Logger

	// CALeaves gives every instance a leaf cache (internal/agent/leaves)
	// holding its agent leaf of the Connect CA, signed by the servers of
	// Datacenter and re-signed within CAResignWindow after a rotation
	// (leaves.DefaultResignWindow when zero); CAServiceLeaf adds one
	// service leaf (sim/sim-service) to each. LeavesHandler serves what
	// they hold. See leaves.go.
	CALeaves       bool
	CAServiceLeaf  bool
	CAResignWindow time.Duration
	// Datacenter is the servers' (default "dc1"): the leaves' SPIFFE ids
	// name it.
	Datacenter string
}

// Fleet is a running fleet.
type Fleet struct {
	cfg    Config
	agents []*agent.Agent
	driver *simdriver.Driver
	dir    string
	temp   bool
	leaves *leafFleet // nil without Config.CALeaves
}

func instanceName(cfg Config, i int) string { return fmt.Sprintf("%s%d", cfg.NamePrefix, i) }

// New makes the fleet's agents; Run runs them.
func New(cfg Config) (*Fleet, error) {
	if cfg.Instances < 1 {
		return nil, fmt.Errorf("-instances: %d: at least one instance", cfg.Instances)
	}
	if len(cfg.Servers) == 0 {
		return nil, errors.New("-server: at least one server's gRPC address is required")
	}
	if cfg.NamePrefix == "" {
		cfg.NamePrefix = "sim-"
	}
	if cfg.StartRate <= 0 {
		cfg.StartRate = 500
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Datacenter == "" {
		cfg.Datacenter = "dc1"
	}
	if cfg.CAResignWindow < 0 {
		return nil, fmt.Errorf("-ca-resign-window: %s is negative", cfg.CAResignWindow)
	}
	if cfg.CAServiceLeaf && !cfg.CALeaves {
		return nil, errors.New("-ca-service-leaf: needs -ca-leaves")
	}
	f := &Fleet{cfg: cfg, driver: simdriver.New(cfg.Driver), dir: cfg.DataDir}
	if f.dir == "" {
		// In memory where the machine has a tmpfs: thousands of agents'
		// records are written on one machine here, which on a real fleet
		// each machine writes to its own disk.
		base := ""
		if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
			base = "/dev/shm"
		}
		dir, err := os.MkdirTemp(base, "trellis-sim-*")
		if err != nil {
			return nil, err
		}
		f.dir, f.temp = dir, true
	}
	// Every driver name a task definition may use runs simulated, so any
	// definition can be placed on a simulated instance.
	drivers := map[string]driver.Driver{"exec": f.driver, "docker": f.driver}
	for i := 1; i <= cfg.Instances; i++ {
		name := instanceName(cfg, i)
		attrs := maps.Clone(cfg.Attributes)
		if attrs == nil {
			attrs = map[string]string{}
		}
		attrs["simulated"] = "true"
		if cfg.Zones > 0 {
			attrs["zone"] = fmt.Sprintf("zone-%d", (i-1)%cfg.Zones+1)
		}
		a, err := agent.New(agent.Config{
			Servers:    agent.RotateServers(cfg.Servers, i-1), // the fleet spreads over the servers
			DataDir:    filepath.Join(f.dir, name),
			Name:       name,
			Cluster:    cfg.Cluster,
			Attributes: attrs,
			Drivers:    drivers,
			NewRunner:  taskrunner.New,
			HTTPAddr:   "127.0.0.1:0",
			Token:      cfg.Token,
			Logger:     cfg.Logger, // the agent names its instance in what it logs
			// The simulated fleet measures the orchestrator; thousands of
			// leaf caches would add a roots watch and signatures per agent.
			DisableLeafCache: true,
			// Simulated tasks write no output: no link for log reads
			// either, which would be a stream per agent on the servers.
			DisableTaskLogs: true,
		})
		if err != nil {
			f.cleanup()
			return nil, fmt.Errorf("instance %s: %w", name, err)
		}
		f.agents = append(f.agents, a)
	}
	if cfg.CALeaves {
		lf, err := newLeafFleet(cfg)
		if err != nil {
			f.cleanup()
			return nil, fmt.Errorf("-ca-leaves: %w", err)
		}
		f.leaves = lf
	}
	return f, nil
}

// Run starts the agents at the configured rate and runs them until ctx
// ends. Simulated tasks die with the process, so their instances simply
// go silent (and are marked down) when it stops.
func (f *Fleet) Run(ctx context.Context, started func(n int)) error {
	defer f.cleanup()
	var wg sync.WaitGroup
	if f.leaves != nil {
		defer f.leaves.close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.leaves.watch(ctx)
		}()
	}
	errs := make(chan error, len(f.agents))
	tick := time.NewTicker(time.Second / time.Duration(f.cfg.StartRate))
	defer tick.Stop()
	for i, a := range f.agents {
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
		if ctx.Err() != nil {
			break
		}
		if f.leaves != nil {
			f.leaves.start(ctx, i+1)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a.Start(ctx); err != nil && !errors.Is(err, context.Canceled) {
				errs <- fmt.Errorf("instance %d: %w", i+1, err)
			}
		}()
		if started != nil && ((i+1)%1000 == 0 || i+1 == len(f.agents)) {
			started(i + 1)
		}
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// Running is how many simulated containers run.
func (f *Fleet) Running() int { return f.driver.Running() }

func (f *Fleet) cleanup() {
	if f.temp {
		_ = os.RemoveAll(f.dir)
	}
}
