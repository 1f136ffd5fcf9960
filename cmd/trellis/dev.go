package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"trellis.dev/trellis/internal/agent"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/client"
	"trellis.dev/trellis/internal/devrun"
	"trellis.dev/trellis/internal/driver"
	dockerdriver "trellis.dev/trellis/internal/driver/docker"
	"trellis.dev/trellis/internal/module"
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
	// datacenter is -datacenter, which only trellis server takes: dev
	// is dc1.
	datacenter string
	// modules are the domains the server serves, configured by their own
	// flags (module.Flagged); nil in tests means server.DefaultModules.
	modules []module.Module
}

func (f *serverFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.httpAddr, "http-addr", server.DefaultHTTPAddr,
		"address of the HTTP/JSON API, always plaintext (host:port); loopback by default: a wider address lets the network in, which the server warns of (docs/tls.md)")
	fs.StringVar(&f.grpcAddr, "grpc-addr", server.DefaultGRPCAddr, "address of the public gRPC API, which agents and tools use (host:port)")
	fs.StringVar(&f.raftAddr, "raft-addr", server.DefaultRaftAddr, "address of Raft, which other servers dial (host:port)")
	fs.StringVar(&f.serverAddr, "server-addr", server.DefaultServerAddr,
		"address of the server-to-server RPCs (write forwarding, joining, heartbeat forwarding), which other servers dial and -retry-join names (host:port); only a server with -data-dir listens on it")
	addLogLevelFlag(fs, &f.logLevel, "info")
	fs.BoolVar(&f.enableDebug, "enable-debug", false, "serve Go's profiling endpoints at /v1/debug/pprof/ on the HTTP API (for diagnosing a server; leave off otherwise)")
}

// registerModules adds the flags the modules declare for process p (the
// orchestrator's -heartbeat-ttl, the CA's -primary-datacenter, ...),
// refusing a flag that two of them, or one of them and the command,
// declare.
func (f *serverFlags) registerModules(fs *pflag.FlagSet, p module.Process, mods []module.Module) error {
	f.modules = mods
	return module.AddFlags(fs, p, mods)
}

func (f *serverFlags) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return nil, cli.Usage(fmt.Errorf("-log-level: %q is not debug, info, warn or error", f.logLevel))
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level})), nil
}

// newDevCmd is trellis dev, serving mods (new values: their flags are
// bound to them).
func newDevCmd(e *cli.Env, mods []module.Module) (*cobra.Command, error) {
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

Without -data-dir everything is kept in memory and gone when it stops, its
tasks too, however it ends: on Ctrl-C, SIGTERM, SIGHUP (the terminal closed)
or SIGPIPE (its output piped to a reader that went away) the agents stop their
tasks first, and say which task they wait for when one takes long; a second
Ctrl-C kills the tasks still stopping. Killed outright, its exec tasks die with
it, and the next trellis dev removes the containers and bridge networks it left
(docs/orchestrator.md, "What survives what"). With -data-dir the server is a
single-server Raft cluster that keeps its data there, the agents keep theirs in
DIR/agents, and tasks keep running across a restart of trellis dev.

As root with the CNI plugins installed (make dev installs them), the agents run
tasks with network: bridge too: they share the bridge -bridge-name, each leasing
addresses from its own part of -bridge-subnet (docs/networking.md).

The server answers DNS for the catalog's services on -dns-addr (default
127.0.0.1:8600, UDP and TCP): dig @127.0.0.1 -p 8600 api.service.default.trellis
(docs/dns.md). Each agent serves DNS in its bridge tasks' namespaces: a task
resolves api.service.default.trellis through its agent, and other names through
the host's resolvers.

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
			return runDev(cmd.Context(), cfg, instances, f.dataDir, network, log, e.Stderr, func(s *server.Server, sockets []string) { printDevBanner(e.Stdout, s, sockets) })
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().StringVar(&f.dataDir, "data-dir", "", "keep data in this directory (a single-server Raft cluster) instead of in memory")
	cmd.Flags().IntVar(&instances, "instances", 1, "how many local agents (instances dev-1 ... dev-N) to run; 0 for none")
	netFlags.register(cmd.Flags())
	if err := f.registerModules(cmd.Flags(), module.Dev, mods); err != nil {
		return nil, fmt.Errorf("trellis dev: %w", err)
	}
	return cmd, nil
}

// config is the server Config of the flags dev and server share.
func (f serverFlags) config() server.Config {
	return server.Config{
		HTTPAddr:    f.httpAddr,
		GRPCAddr:    f.grpcAddr,
		RaftAddr:    f.raftAddr,
		ServerAddr:  f.serverAddr,
		EnableDebug: f.enableDebug,
		Datacenter:  f.datacenter,
		Modules:     f.modules,
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

// devSignals end trellis dev: SIGINT (Ctrl-C), SIGTERM, SIGHUP (its
// terminal closed) and SIGPIPE (its output piped to a reader that died,
// as `trellis dev | tee log` does on Ctrl-C) all stop it the same way, its
// tasks first. Go's default for SIGHUP and SIGPIPE is to die at once,
// leaving the tasks behind; once notified, a write to a broken stdout
// returns EPIPE instead, which nothing here treats as fatal.
var devSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE}

// notIgnored are the signals of sigs this process was not started with
// ignored: `nohup trellis dev` must outlive its terminal, and a dev started
// in the background by a script ignores SIGINT, yet Notify would undo
// both.
func notIgnored(sigs []os.Signal) []os.Signal {
	var out []os.Signal
	for _, s := range sigs {
		if !signal.Ignored(s) {
			out = append(out, s)
		}
	}
	return out
}

// runDev runs the dev server and its agents until ctx ends or one of
// devSignals arrives. The agents stop before the server, so that their
// last reports are stored. Without dataDir, before it starts it removes
// what earlier runs of dev left when they died (devrun.Sweep), and while
// it stops, a second signal other than SIGPIPE kills the tasks still
// stopping rather than waiting out their stop timeouts; notes says so.
func runDev(ctx context.Context, cfg server.Config, instances int, dataDir string, network *agent.NetworkConfig, log *slog.Logger, notes io.Writer, started func(s *server.Server, agentSockets []string)) error {
	raw := make(chan os.Signal, 4)
	if handled := notIgnored(devSignals); len(handled) > 0 { // none would mean all
		signal.Notify(raw, handled...)
	}
	defer signal.Stop(raw)
	filtered := make(chan struct{})
	defer close(filtered)
	sigs := filterPipe(raw, filtered, outputBroken)
	s, err := server.New(cfg)
	if err != nil {
		return err
	}
	sweepDevRuns(ctx, log)
	var run *devrun.Run
	if dataDir == "" {
		if run, err = devrun.Start(""); err != nil {
			return err
		}
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), devKillTimeout)
			defer cancel()
			if err := run.Close(ctx); err != nil {
				log.Warn("cannot remove everything of this run; the next trellis dev will", "dir", run.Dir(), "err", err)
			}
		}()
	}
	agents, err := newDevAgents(instances, s, dataDir, run, network, log)
	if err != nil {
		return err
	}
	srvCtx, stopServer := context.WithCancel(context.Background())
	defer stopServer()
	srvDone := make(chan error, 1)
	go func() { srvDone <- s.Start(srvCtx) }()
	agentCtx, stopAgents := context.WithCancel(context.Background())
	agents.start(agentCtx)
	if started != nil {
		// The banner says the instances are there: a command typed at
		// once must find them registered.
		waitDevAgents(ctx, agents, sigs, srvDone, log)
		var sockets []string
		for _, a := range agents.agents {
			sockets = append(sockets, a.ControlSocket())
		}
		started(s, sockets)
	}
	var srvErr error
	kill, stopped := make(chan string, 1), make(chan struct{})
	defer close(stopped)
	select {
	case <-ctx.Done():
	case sig := <-sigs:
		if run != nil && len(agents.agents) > 0 {
			fmt.Fprintf(notes, "%v: stopping every task (SIGTERM, then SIGKILL after its stop timeout); interrupt again to kill them now.\n", sig)
		}
	case srvErr = <-srvDone:
		srvDone = nil
		// No leave can finish without the server: kill at once.
		kill <- "The server stopped: killing the tasks (SIGKILL)."
	case err := <-agents.errs:
		log.Error("a local agent stopped", "err", err)
	}
	go func() {
		for {
			select {
			case sig := <-sigs:
				if sig != syscall.SIGPIPE {
					select {
					case kill <- "Second interrupt: killing the tasks that still run (SIGKILL), then exiting.":
					default:
					}
					return
				}
			case <-stopped:
				return
			}
		}
	}()
	agents.stop(stopAgents, kill, notes, log)
	stopServer()
	if srvDone != nil {
		srvErr = <-srvDone
	}
	return srvErr
}

// devReadyWait bounds how long dev waits for its agents to connect before
// it prints its banner anyway.
const devReadyWait = 30 * time.Second

// waitDevAgents waits until every local agent is registered and heard,
// at most devReadyWait, or until something the caller must act on comes
// first: ctx ending, a signal or the server stopping, which it leaves in
// their channels for the caller (each is buffered and was just emptied).
func waitDevAgents(ctx context.Context, agents *devAgents, sigs chan os.Signal, srvDone chan error, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, devReadyWait)
	defer cancel()
	waiting := make(chan []string, 1)
	go func() { waiting <- agents.waitConnected(ctx) }()
	select {
	case names := <-waiting:
		if len(names) > 0 && ctx.Err() == context.DeadlineExceeded {
			log.Warn("local agents not connected yet; they go on trying", "agents", names, "waited", devReadyWait)
		}
		return
	case sig := <-sigs:
		sigs <- sig
	case err := <-srvDone:
		srvDone <- err
	case err := <-agents.errs:
		agents.errs <- err
	}
	cancel()
	<-waiting
}

// sweepDevRuns removes what runs of dev that died without cleaning up left
// on this host (package devrun). A failure is noted, never fatal: it is
// tried again at the next start.
func sweepDevRuns(ctx context.Context, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, devLeaveTimeout)
	defer cancel()
	docker := dockerdriver.New(dockerdriver.Config{Logger: log})
	defer docker.Close()
	if _, err := devrun.Sweep(ctx, "", devDocker{docker}, log); err != nil {
		log.Warn("cannot remove everything earlier runs of trellis dev left behind", "err", err)
	}
}

// devDocker is the engine for the sweep; an engine that is not there, or
// does not answer within devDockerProbe, has nothing to sweep (dev must not
// wait on a DOCKER_HOST that is down).
type devDocker struct{ d *dockerdriver.Driver }

// devDockerProbe bounds the sweep's first look at the engine.
const devDockerProbe = 3 * time.Second

func (e devDocker) RemoveMarked(ctx context.Context, key string, dead func(string) bool) (int, error) {
	probe, cancel := context.WithTimeout(ctx, devDockerProbe)
	defer cancel()
	if !e.d.Fingerprint(probe).Available {
		return 0, nil
	}
	n, err := e.d.RemoveMarked(ctx, key, dead)
	if errors.Is(err, driver.ErrUnavailable) {
		return n, nil
	}
	return n, err
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
	if !s.InMemory() { // in memory, nothing listens on -raft-addr
		fmt.Fprintf(&b, "  Raft:      %s\n", s.RaftAddr())
	}
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
