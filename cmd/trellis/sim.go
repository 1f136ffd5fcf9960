package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime/debug"
	"time"

	"github.com/spf13/cobra"

	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/sim"
)

func newSimCmd(e *cli.Env) *cobra.Command {
	var (
		cfg        sim.Config
		attributes []string
		logLevel   string
		pprofAddr  string
		statusAddr string
		gcPercent  int
	)
	cmd := &cobra.Command{
		Use:   "sim -instances N -server ADDR",
		Short: "Run many simulated instances in this process against real servers",
		Long: `Run N simulated instances, sim-1 ... sim-N, in this process. Each is a real
agent: it registers its Instance, heartbeats, watches for the tasks placed on
it and reports them, over gRPC to the servers of -server. Only the tasks are
simulated: they "run" without processes, at once or after -start-delay, fail
to start with probability -start-failure-rate, and exit by themselves (code 1)
after -exit-after with probability -exit-rate.

It is for trying schedulers and measuring servers at a scale one machine
cannot run for real. Every instance carries the attribute simulated=true, and
with -zones K a zone attribute zone-1 ... zone-K, round-robin.

Its Go garbage collector runs with -gc-percent 400 (Go's default is 100;
GOGC in the environment wins): thousands of agents share one heap here, and
with Go's default the collector took a fifth of the process's CPU away from
the servers it shares the machine with. Agents on machines of their own do
not compete with the servers.

With -ca-leaves every instance also holds a leaf cache, as a real agent
does: its agent leaf of the Connect CA (and with -ca-service-leaf one service
leaf), its key made here, signed by the servers (CAService.Sign), renewed at
60-90 % of its life and re-signed within -ca-resign-window after a root
rotation. The caches share one watch of the CA's roots and one connection
per server (a real agent has its own). -status-addr serves what they hold:
GET /v1/sim/leaves counts the instances holding leaves and those holding
leaves of the active root; GET /v1/sim/leaves/sample?every=N returns the
agent leaf and chain (PEM, never a key) of every N-th instance.

Stop it with Ctrl-C; its instances then go silent and the servers mark them
down after the heartbeat TTL.`,
		Example: `  trellis sim -instances 5000 -server 127.0.0.1:7701
  trellis sim -instances 100 -server 127.0.0.1:7701 -zones 3 -exit-rate 0.1 -exit-after 30s
  trellis sim -instances 5000 -server 127.0.0.1:7701 -ca-leaves -status-addr 127.0.0.1:7800
  curl -s 127.0.0.1:7800/v1/sim/leaves`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := (&serverFlags{logLevel: logLevel}).logger(e.Stderr)
			if err != nil {
				return err
			}
			if cfg.Attributes, err = parseAttributes(attributes); err != nil {
				return cli.Usage(err)
			}
			for _, p := range []struct {
				name string
				v    float64
			}{{"-start-failure-rate", cfg.Driver.StartFailureRate}, {"-exit-rate", cfg.Driver.ExitRate}} {
				if p.v < 0 || p.v > 1 {
					return cli.Usage(fmt.Errorf("%s: %g is not a probability from 0 to 1", p.name, p.v))
				}
			}
			if cfg.Instances < 1 || cfg.Instances > 100_000 {
				return cli.Usage(fmt.Errorf("-instances: %d is not 1 to 100000", cfg.Instances))
			}
			if len(cfg.Servers) == 0 {
				return cli.Usage(fmt.Errorf("-server: required: a server's gRPC address (host:port)"))
			}
			if gcPercent < 0 {
				return cli.Usage(fmt.Errorf("-gc-percent: %d is negative", gcPercent))
			}
			if os.Getenv("GOGC") == "" {
				debug.SetGCPercent(gcPercent)
			}
			if pprofAddr != "" {
				ln, err := net.Listen("tcp", pprofAddr)
				if err != nil {
					return cli.Usage(fmt.Errorf("-pprof-addr: %w", err))
				}
				mux := http.NewServeMux()
				mux.HandleFunc("/debug/pprof/", pprof.Index)
				mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
				go func() { _ = http.Serve(ln, mux) }()
				defer ln.Close()
			}
			cfg.Token = e.Token()
			cfg.Logger = log
			fleet, err := sim.New(cfg)
			if err != nil {
				return cli.Usage(err)
			}
			if statusAddr != "" {
				ln, err := net.Listen("tcp", statusAddr)
				if err != nil {
					return cli.Usage(fmt.Errorf("-status-addr: %w", err))
				}
				go func() { _ = http.Serve(ln, fleet.LeavesHandler()) }()
				defer ln.Close()
			}
			ctx, stop := cli.SignalContext(cmd.Context())
			defer stop()
			start := time.Now()
			return fleet.Run(ctx, func(n int) {
				fmt.Fprintf(e.Stdout, "%d of %d simulated instances started (%s)\n", n, cfg.Instances, time.Since(start).Round(time.Millisecond))
			})
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&cfg.Instances, "instances", 100, "how many instances to simulate")
	fs.StringArrayVar(&cfg.Servers, "server", nil, "gRPC address (host:port) of a server; repeatable (required)")
	fs.StringVar(&cfg.NamePrefix, "name-prefix", "sim-", "instances are named PREFIX1, PREFIX2, ...")
	fs.StringVar(&cfg.Cluster, "cluster", "default", "cluster of the instances")
	fs.StringArrayVar(&attributes, "attribute", nil, "an attribute of every instance, key=value; repeatable")
	fs.IntVar(&cfg.Zones, "zones", 0, "spread a zone attribute (zone-1 ... zone-K) over the instances")
	fs.StringVar(&cfg.DataDir, "data-dir", "", "directory for the agents' state (default: a temporary one in /dev/shm when there is one, removed at the end)")
	fs.IntVar(&cfg.StartRate, "start-rate", 500, "instances started per second")
	fs.DurationVar(&cfg.Driver.StartDelay, "start-delay", 0, "how long a simulated container takes to start")
	fs.Float64Var(&cfg.Driver.StartFailureRate, "start-failure-rate", 0, "probability that a simulated container fails to start")
	fs.Float64Var(&cfg.Driver.ExitRate, "exit-rate", 0, "probability that a simulated container exits by itself (code 1)")
	fs.DurationVar(&cfg.Driver.ExitAfter, "exit-after", time.Minute, "when a container that exits by itself does so")
	fs.Uint64Var(&cfg.Driver.Seed, "seed", 1, "seed of the simulated failures, for repeatable runs")
	fs.BoolVar(&cfg.CALeaves, "ca-leaves", false, "give every instance a leaf cache holding its agent leaf of the Connect CA")
	fs.BoolVar(&cfg.CAServiceLeaf, "ca-service-leaf", false, "with -ca-leaves, one service leaf (sim/sim-service) per instance too")
	fs.DurationVar(&cfg.CAResignWindow, "ca-resign-window", 30*time.Second, "with -ca-leaves, the window over which a root rotation's re-signing is spread")
	fs.StringVar(&cfg.Datacenter, "datacenter", "dc1", "the servers' datacenter, which the leaves' SPIFFE ids name")
	fs.StringVar(&statusAddr, "status-addr", "", "serve the fleet's leaves on HOST:PORT (GET /v1/sim/leaves, /v1/sim/leaves/sample?every=N)")
	addLogLevelFlag(fs, &logLevel, "warn")
	e.ClientFlags.RegisterToken(fs)
	fs.IntVar(&gcPercent, "gc-percent", 400, "the Go garbage collector's target (GOGC) for this process; GOGC in the environment wins")
	fs.StringVar(&pprofAddr, "pprof-addr", "", "serve Go's pprof profiles of this process on HOST:PORT (/debug/pprof/), to see what the fleet costs")
	return cmd
}
