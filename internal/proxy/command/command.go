package command

import (
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"trellis.dev/trellis/internal/cli"
)

// NewProxyCmd is `trellis proxy`.
func NewProxyCmd(e *cli.Env) *cobra.Command {
	var cfg Config
	cmd := &cobra.Command{
		Use:   "proxy",
		Short: "Run a mesh task's sidecar proxy (the agent starts it in every mesh task)",
		Long: `Run the built-in sidecar proxy of one mesh task. The agent adds it to every task
whose definition has a mesh block, as the container trellis-proxy, running as
uid and gid 1337 (which the redirect rules skip) in the task's network
namespace; it is not meant to be started by hand.

The proxy dials the agent's socket (-socket, proxy.sock in the task's
directory), watches the task's proxy snapshots and serves the current one:

  15000            inbound: mTLS with the task's leaf, the peer's SPIFFE id,
                   then the intentions, and on to the app's port
  127.0.0.1:PORT   one listener per explicit upstream of the mesh block
  15001            transparent outbound (a transparent task's redirected TCP)
  127.0.0.1:19000  admin: /ready (the agent's health check: the app starts once
                   it passes), /stats (Prometheus), /config (the snapshot,
                   without its key)

A new snapshot replaces the previous one whole; one the proxy refuses leaves
the previous in place. While the agent is away the proxy keeps serving its
last snapshot and redials with backoff.

On SIGUSR1, which the agent sends when the task begins to stop, the proxy
drains: its inbound listener closes (new connections are refused, so clients
retry another instance), the connections open finish, and the app's outbound
traffic is still carried. On SIGTERM, which the agent sends once the task's
other containers have exited, it drains if it was not already, waits for the
connections it carries to end (at most -drain-timeout), closes what is left
and exits 0.
See docs/mesh.md.`,
		Example: `  # what the agent runs in a mesh task (its directory under the agent's data dir)
  trellis proxy -socket /var/lib/trellis/agent/tasks/UID/proxy.sock -task 01jd3k8yq0w5x6rz3b2v4n7c9e`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The drain signal, caught first: its default would end the
			// process.
			usr1 := make(chan os.Signal, 1)
			signal.Notify(usr1, syscall.SIGUSR1)
			defer signal.Stop(usr1)
			drain, done := make(chan struct{}), make(chan struct{})
			defer close(done)
			go func() {
				select {
				case <-usr1:
					close(drain)
				case <-done:
				}
			}()
			cfg.Drain = drain
			if err := cfg.check(); err != nil {
				return cli.Usage(err)
			}
			cfg.Log = slog.New(slog.NewTextHandler(e.Stderr, nil))
			ctx, stop := cli.SignalContext(cmd.Context())
			defer stop()
			return Run(ctx, cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Socket, "socket", "", "the agent's Unix socket serving the task's snapshots (proxy.sock in the task's directory)")
	f.StringVar(&cfg.Task, "task", "", "the name of the task the proxy serves (the agent's socket answers that task alone)")
	f.DurationVar(&cfg.DrainTimeout, "drain-timeout", DefaultDrainTimeout, "after SIGTERM, how long open connections may take to end before they are closed")
	return cmd
}
