package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/module"
	"trellis.dev/trellis/internal/server"
	raftstore "trellis.dev/trellis/internal/storage/raft"
	"trellis.dev/trellis/internal/tlsutil"
)

// newServerCmd is trellis server, serving mods (new values: their flags
// are bound to them).
func newServerCmd(e *cli.Env, mods []module.Module) (*cobra.Command, error) {
	var (
		f               serverFlags
		bootstrapExpect int
		retryJoin       []string
		raftMultiplier  int
		tlsFiles        tlsutil.Config
		httpsAddr       string
	)
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run a Trellis server: a Raft voter that stores resources and serves the APIs",
		Long: `Run a Trellis server as a member of a cluster of 3 or 5.

A new cluster forms once -bootstrap-expect servers have found each other:
start each with the same -bootstrap-expect and -retry-join naming the others'
server-to-server addresses (-server-addr, port 7703 by default). A server restarted with its -data-dir rejoins with its data.
A server that should join an existing cluster takes -retry-join alone.

Servers talk to each other on two ports of their own: Raft (-raft-addr) and
the server-to-server RPCs (-server-addr: write forwarding, joining, heartbeat
forwarding). Agents and tools use only the HTTP and public gRPC ports. With
-tls-ca-file, -tls-cert-file and -tls-key-file (see trellis tls), both server
ports accept only servers holding a server certificate of the cluster's CA,
the public gRPC port serves TLS (agents then need -tls-ca-file), -https-addr
serves the HTTP API over TLS, and the files are read again on SIGHUP.

With TLS, once the cluster's Connect CA has a root, each server signs itself a
leaf of the CA (spiffe://<trust-domain>/server/dc/<dc>/id/<node-id>), keeps it
renewed, and presents it instead of -tls-cert-file to the servers and agents
that ask for it: they ask by name (server.<dc>.connect.trellis) once they
follow the CA's roots, so the CLI and an agent at its first join, which hold
only the cluster CA, still get the certificate file. -connect-server-certs=false
keeps the server on its file (docs/ca.md).

-datacenter names the cluster's datacenter (dc1 by default): the Connect CA
signs leaf certificates whose SPIFFE ids name it, and -tls-cert-file must be a
server certificate of it (server.<datacenter>.trellis).

-primary-datacenter and -primary-address make the cluster a secondary
datacenter of the Connect CA: its leader takes the primary's roots (and its
trust domain) and has the primary sign an intermediate CA that its servers sign
leaves with, so that services of every datacenter verify each other.
-primary-address is the server-to-server address (-server-addr) of a server of
the primary; give several (repeated, or comma-separated) to try them in turn.
The leader asks there as a server: the datacenters of a federation share one
cluster CA (-tls-ca-file), each server holding a server certificate of its own
datacenter (server.<dc>.trellis), and the primary signs a datacenter's
intermediate for that datacenter's servers only.
Without -primary-datacenter, or with this server's own -datacenter, the
cluster is the primary and makes its own root (docs/ca.md).

When the leader dies, the others elect a new one in about a second. On slow
networks or busy, shared machines, where a server may miss the leader's
heartbeats for half a second without anything being wrong, give every server
the same -raft-multiplier above 1 to wait longer before electing.`,
		Example: `  # three servers on one machine (each in its own terminal)
  trellis server -data-dir /var/lib/trellis/s1 -http-addr 127.0.0.1:7700 -grpc-addr 127.0.0.1:7701 -raft-addr 127.0.0.1:7702 \
      -server-addr 127.0.0.1:7703 -bootstrap-expect 3 -retry-join 127.0.0.1:7713 -retry-join 127.0.0.1:7723
  trellis server -data-dir /var/lib/trellis/s2 -http-addr 127.0.0.1:7710 -grpc-addr 127.0.0.1:7711 -raft-addr 127.0.0.1:7712 \
      -server-addr 127.0.0.1:7713 -bootstrap-expect 3 -retry-join 127.0.0.1:7703 -retry-join 127.0.0.1:7723
  trellis server -data-dir /var/lib/trellis/s3 -http-addr 127.0.0.1:7720 -grpc-addr 127.0.0.1:7721 -raft-addr 127.0.0.1:7722 \
      -server-addr 127.0.0.1:7723 -bootstrap-expect 3 -retry-join 127.0.0.1:7703 -retry-join 127.0.0.1:7713

  # a one-server secondary datacenter dc2 of the cluster above (dc1)
  trellis server -data-dir /var/lib/trellis/dc2 -datacenter dc2 -http-addr 127.0.0.1:7800 -grpc-addr 127.0.0.1:7801 \
      -raft-addr 127.0.0.1:7802 -server-addr 127.0.0.1:7803 -bootstrap-expect 1 \
      -primary-datacenter dc1 -primary-address 127.0.0.1:7703,127.0.0.1:7713`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := serverConfig(f, bootstrapExpect, retryJoin, raftMultiplier)
			if err != nil {
				return err
			}
			if tlsFiles.Enabled() {
				// A server's certificate names its datacenter
				// (server.<dc>.trellis).
				tlsFiles.Server, tlsFiles.Datacenter = true, cfg.Datacenter
				if cfg.TLS, err = tlsutil.New(tlsFiles); err != nil {
					return cli.Usage(err)
				}
			}
			cfg.HTTPSAddr = httpsAddr
			if err := cfg.Validate(); err != nil {
				return cli.Usage(err)
			}
			log, err := f.logger(e.Stderr)
			if err != nil {
				return err
			}
			cfg.Logger = log
			return runServer(cmd.Context(), cfg, func(s *server.Server) {
				log.Info("trellis server running", "http", "http://"+s.HTTPAddr(), "https", s.HTTPSAddr(), "grpc", s.GRPCAddr(), "raft", s.RaftAddr(), "server", s.ServerAddr())
			})
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().StringVar(&f.dataDir, "data-dir", "", "directory for the Raft log, snapshots and state (required)")
	cmd.Flags().IntVar(&bootstrapExpect, "bootstrap-expect", 0, "number of servers to wait for before forming a new cluster (0: join an existing one)")
	cmd.Flags().StringArrayVar(&retryJoin, "retry-join", nil, "server-to-server address (another server's -server-addr, host:port) to join through; repeatable, retried until one answers")
	cmd.Flags().StringVar(&f.datacenter, "datacenter", tlsutil.DefaultDatacenter,
		"the datacenter this server is part of, a lower-case DNS label: every server of a cluster gives the same one; the Connect CA signs certificates of this datacenter only")
	cmd.Flags().StringVar(&httpsAddr, "https-addr", "", "also serve the HTTP API over TLS on this address (host:port; needs the -tls-* files)")
	cmd.Flags().StringVar(&tlsFiles.CAFile, "tls-ca-file", "", "the cluster CA's certificate (PEM, from `trellis tls ca create`): with -tls-cert-file and -tls-key-file, servers talk to each other (Raft and -server-addr) only over mutual TLS")
	cmd.Flags().StringVar(&tlsFiles.CertFile, "tls-cert-file", "", "this server's certificate (PEM, from `trellis tls cert create -server`); reloaded on SIGHUP")
	cmd.Flags().StringVar(&tlsFiles.KeyFile, "tls-key-file", "", "the private key of -tls-cert-file (PEM); reloaded on SIGHUP")
	cmd.Flags().IntVar(&raftMultiplier, "raft-multiplier", DefaultRaftMultiplier,
		"scale Raft's failure detection, 1 to 10: a follower calls an election after 0.5-1 s times this without the leader's heartbeats. "+
			"1 (a LAN) replaces a dead leader in about a second; raise it for slow networks or busy, shared machines, where needless elections cost more")
	if err := f.registerModules(cmd.Flags(), module.Server, mods); err != nil {
		return nil, fmt.Errorf("trellis server: %w", err)
	}
	return cmd, nil
}

// DefaultRaftMultiplier is -raft-multiplier's default: servers on a LAN,
// where a dead leader is replaced in about a second (docs/cluster.md).
const DefaultRaftMultiplier = 1

// serverConfig turns the server command's flags into a validated Config.
func serverConfig(f serverFlags, bootstrapExpect int, retryJoin []string, raftMultiplier int) (server.Config, error) {
	if raftMultiplier < 1 || raftMultiplier > raftstore.MaxRaftMultiplier {
		return server.Config{}, cli.Usage(fmt.Errorf("-raft-multiplier: %d is out of range: give an integer from 1 (a LAN) to %d (slow networks, busy machines)",
			raftMultiplier, raftstore.MaxRaftMultiplier))
	}
	cfg := f.config()
	cfg.Raft = &server.RaftConfig{
		DataDir:         f.dataDir,
		BootstrapExpect: bootstrapExpect,
		RetryJoin:       retryJoin,
		RaftMultiplier:  raftMultiplier,
	}
	if err := cfg.Validate(); err != nil {
		return cfg, cli.Usage(err)
	}
	return cfg, nil
}
