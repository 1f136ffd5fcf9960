package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"trellis.dev/trellis/internal/agent"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/client"
	"trellis.dev/trellis/internal/orchestrator/heartbeat"
	"trellis.dev/trellis/internal/server"
	"trellis.dev/trellis/internal/tlsutil"
)

// serverFlags are the flags dev and server share.
type serverFlags struct {
	httpAddr, grpcAddr, raftAddr string
	serverAddr                   string
	dataDir                      string
	logLevel                     string
	enableDebug                  bool
	heartbeatTTL                 time.Duration
	// datacenter is -datacenter, which only trellis server takes: dev
	// is dc1.
	datacenter string
}

func (f *serverFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.httpAddr, "http-addr", server.DefaultHTTPAddr,
		"address of the HTTP/JSON API, always plaintext (host:port); loopback by default: a wider address lets the network in, which the server warns of (docs/tls.md)")
	fs.StringVar(&f.grpcAddr, "grpc-addr", server.DefaultGRPCAddr, "address of the public gRPC API, which agents and tools use (host:port)")
	fs.StringVar(&f.raftAddr, "raft-addr", server.DefaultRaftAddr, "address of Raft, which other servers dial (host:port)")
	fs.StringVar(&f.serverAddr, "server-addr", server.DefaultServerAddr,
		"address of the server-to-server RPCs (write forwarding, joining, heartbeat forwarding), which other servers dial and -retry-join names (host:port); only a server with -data-dir listens on it")
	addLogLevelFlag(fs, &f.logLevel, "info")
	fs.DurationVar(&f.heartbeatTTL, "heartbeat-ttl", heartbeat.DefaultTTL, "how long an instance's agent may be silent before the instance is marked down and its tasks lost")
	fs.BoolVar(&f.enableDebug, "enable-debug", false, "serve Go's profiling endpoints at /v1/debug/pprof/ on the HTTP API (for diagnosing a server; leave off otherwise)")
}

func (f *serverFlags) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return nil, cli.Usage(fmt.Errorf("-log-level: %q is not debug, info, warn or error", f.logLevel))
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level})), nil
}

func newDevCmd(e *cli.Env) *cobra.Command {
	var (
		f         serverFlags
		instances int
		netFlags  networkFlags
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a Trellis server and local agents in this process, ready at once, with nothing to configure",
		Long: `Run one Trellis server that is its own cluster and leader at once, and
-instances local agents (default 1) that run tasks on this machine: instances
dev-1, dev-2, ... each with its own data directory and a distinct zone
attribute (zone-1, zone-2, ...), so a small cluster can be tried on one box.

Without -data-dir everything is kept in memory and gone when it stops: on
Ctrl-C the agents stop their tasks first. With -data-dir the server is a
single-server Raft cluster that keeps its data there, the agents keep theirs in
DIR/agents, and tasks keep running across a restart of trellis dev.

As root with the CNI plugins installed (make dev installs them), the agents run
tasks with network: bridge too: they share the bridge -bridge-name, each leasing
addresses from its own part of -bridge-subnet (docs/networking.md).

It prints where its APIs listen and what to try first. Stop it with Ctrl-C.`,
		Example: `  trellis dev
  trellis dev -instances 3
  trellis dev -http-addr 127.0.0.1:8500 -grpc-addr 127.0.0.1:8501 -data-dir ./trellis-data`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := f.logger(e.Stderr)
			if err != nil {
				return err
			}
			if instances < 0 || instances > 64 {
				return cli.Usage(fmt.Errorf("-instances: %d is not 0 to 64", instances))
			}
			cfg, err := devConfig(f)
			if err != nil {
				return err
			}
			cfg.Logger = log
			network, err := netFlags.config()
			if err != nil {
				return cli.Usage(err)
			}
			return runDev(cmd.Context(), cfg, instances, f.dataDir, network, log, func(s *server.Server, sockets []string) { printDevBanner(e.Stdout, s, sockets) })
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().StringVar(&f.dataDir, "data-dir", "", "keep data in this directory (a single-server Raft cluster) instead of in memory")
	cmd.Flags().IntVar(&instances, "instances", 1, "how many local agents (instances dev-1 ... dev-N) to run; 0 for none")
	netFlags.register(cmd.Flags())
	return cmd
}

// config is the server Config of the flags dev and server share.
func (f serverFlags) config() server.Config {
	return server.Config{
		HTTPAddr:     f.httpAddr,
		GRPCAddr:     f.grpcAddr,
		RaftAddr:     f.raftAddr,
		ServerAddr:   f.serverAddr,
		EnableDebug:  f.enableDebug,
		HeartbeatTTL: f.heartbeatTTL,
		Datacenter:   f.datacenter,
	}
}

// devConfig turns dev's flags into a validated server Config.
func devConfig(f serverFlags) (server.Config, error) {
	cfg := f.config()
	if f.dataDir != "" {
		cfg.Raft = &server.RaftConfig{DataDir: f.dataDir, BootstrapExpect: 1, SingleServer: true}
		// A single server has no peer, but its server-to-server port
		// listens all the same: certificates made in memory for this run
		// close it to everything else. The public ports stay plaintext,
		// for the clients of the quick start.
		b, err := tlsutil.NewDevBundle("", time.Time{})
		if err != nil {
			return cfg, err
		}
		if cfg.TLS, err = tlsutil.NewFromBundle(b); err != nil {
			return cfg, err
		}
		cfg.PublicPlaintext = true
	}
	if err := cfg.Validate(); err != nil {
		return cfg, cli.Usage(err)
	}
	return cfg, nil
}

// runDev runs the dev server and its agents until ctx ends or SIGINT or
// SIGTERM arrives; a second signal kills the process the default way. The
// agents stop before the server, so that their last reports are stored.
func runDev(ctx context.Context, cfg server.Config, instances int, dataDir string, network *agent.NetworkConfig, log *slog.Logger, started func(s *server.Server, agentSockets []string)) error {
	s, err := server.New(cfg)
	if err != nil {
		return err
	}
	agents, err := newDevAgents(instances, s, dataDir, network, log)
	if err != nil {
		return err
	}
	sigCtx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	srvCtx, stopServer := context.WithCancel(context.Background())
	defer stopServer()
	srvDone := make(chan error, 1)
	go func() { srvDone <- s.Start(srvCtx) }()
	agentCtx, stopAgents := context.WithCancel(context.Background())
	agents.start(agentCtx)
	if started != nil {
		var sockets []string
		for _, a := range agents.agents {
			sockets = append(sockets, a.ControlSocket())
		}
		started(s, sockets)
	}
	var srvErr error
	select {
	case <-sigCtx.Done():
	case srvErr = <-srvDone:
		srvDone = nil
	case err := <-agents.errs:
		log.Error("a local agent stopped", "err", err)
	}
	stop() // the next Ctrl-C ends the process at once
	agents.stop(stopAgents, log)
	stopServer()
	if srvDone != nil {
		srvErr = <-srvDone
	}
	return srvErr
}

// runServer assembles a server and runs it until ctx ends or SIGINT or
// SIGTERM arrives; a second signal kills the process the default way.
func runServer(ctx context.Context, cfg server.Config, started func(*server.Server)) error {
	s, err := server.New(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop() // the next Ctrl-C ends the process at once
	}()
	if started != nil {
		started(s)
	}
	return s.Start(ctx)
}

func printDevBanner(w io.Writer, s *server.Server, agentSockets []string) {
	instances := len(agentSockets)
	httpURL := "http://" + s.HTTPAddr()
	storage := "in memory: nothing is kept after it stops"
	if !s.InMemory() {
		storage = "a single-server Raft cluster"
	}
	addrFlag := ""
	if httpURL != client.DefaultAddr {
		addrFlag = " -addr " + httpURL
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Trellis dev server (%s) is running.\n", storage)
	fmt.Fprintf(&b, "  HTTP API:  %s\n", httpURL)
	fmt.Fprintf(&b, "  gRPC API:  %s\n", s.GRPCAddr())
	fmt.Fprintf(&b, "  Raft:      %s\n", s.RaftAddr())
	if instances > 0 {
		names := make([]string, instances)
		for i := range names {
			names[i] = devInstanceName(i + 1)
		}
		fmt.Fprintf(&b, "  Instances: %s (local agents running tasks on this machine)\n", strings.Join(names, ", "))
		fmt.Fprintf(&b, "  Agent control sockets (trellis agent leave -socket ...): %s\n", strings.Join(agentSockets, ", "))
	}
	fmt.Fprintf(&b, "Try this, in another terminal:\n")
	if instances > 0 {
		fmt.Fprintf(&b, "  echo '{family: hello, containers: [{name: main, driver: exec, command: [/bin/sh, -c, \"while true; do echo hello; sleep 5; done\"]}]}' | trellis taskdef register%s -f -\n", addrFlag)
		fmt.Fprintf(&b, "  trellis task run%s --taskdef hello --instance %s\n", addrFlag, devInstanceName(1))
		fmt.Fprintf(&b, "  trellis task list%s\n", addrFlag)
		fmt.Fprintf(&b, "  trellis task logs%s TASK -f\n", addrFlag)
		fmt.Fprintf(&b, "  trellis instance list%s\n", addrFlag)
	}
	fmt.Fprintf(&b, "  echo '{type: core/v1/Namespace, name: demo, data: {description: my first namespace}}' | trellis resource apply%s -f -\n", addrFlag)
	fmt.Fprintf(&b, "  trellis resource list%s core/v1/Namespace\n", addrFlag)
	fmt.Fprintf(&b, "Press Ctrl-C to stop.\n")
	_, _ = io.WriteString(w, b.String())
}
