package main

import (
	"github.com/spf13/cobra"

	"trellis.dev/trellis/internal/server"
)

func newServerCmd(e *env) *cobra.Command {
	var (
		f               serverFlags
		bootstrapExpect int
		retryJoin       []string
	)
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run a Trellis server: a Raft voter that stores resources and serves the APIs",
		Long: `Run a Trellis server as a member of a cluster of 3 or 5.

A new cluster forms once -bootstrap-expect servers have found each other:
start each with the same -bootstrap-expect and -retry-join naming the others'
gRPC addresses. A server restarted with its -data-dir rejoins with its data.
A server that should join an existing cluster takes -retry-join alone.`,
		Example: `  # three servers on one machine (each in its own terminal)
  trellis server -data-dir /var/lib/trellis/s1 -http-addr 127.0.0.1:7700 -grpc-addr 127.0.0.1:7701 -raft-addr 127.0.0.1:7702 \
      -bootstrap-expect 3 -retry-join 127.0.0.1:7711 -retry-join 127.0.0.1:7721
  trellis server -data-dir /var/lib/trellis/s2 -http-addr 127.0.0.1:7710 -grpc-addr 127.0.0.1:7711 -raft-addr 127.0.0.1:7712 \
      -bootstrap-expect 3 -retry-join 127.0.0.1:7701 -retry-join 127.0.0.1:7721
  trellis server -data-dir /var/lib/trellis/s3 -http-addr 127.0.0.1:7720 -grpc-addr 127.0.0.1:7721 -raft-addr 127.0.0.1:7722 \
      -bootstrap-expect 3 -retry-join 127.0.0.1:7701 -retry-join 127.0.0.1:7711`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := serverConfig(f, bootstrapExpect, retryJoin)
			if err != nil {
				return err
			}
			log, err := f.logger(e.stderr)
			if err != nil {
				return err
			}
			cfg.Logger = log
			return runServer(cmd.Context(), cfg, func(s *server.Server) {
				log.Info("trellis server running", "http", "http://"+s.HTTPAddr(), "grpc", s.GRPCAddr(), "raft", s.RaftAddr())
			})
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().StringVar(&f.dataDir, "data-dir", "", "directory for the Raft log, snapshots and state (required)")
	cmd.Flags().IntVar(&bootstrapExpect, "bootstrap-expect", 0, "number of servers to wait for before forming a new cluster (0: join an existing one)")
	cmd.Flags().StringArrayVar(&retryJoin, "retry-join", nil, "gRPC address (host:port) of another server to join through; repeatable, retried until one answers")
	return cmd
}

// serverConfig turns the server command's flags into a validated Config.
func serverConfig(f serverFlags, bootstrapExpect int, retryJoin []string) (server.Config, error) {
	cfg := server.Config{
		HTTPAddr:     f.httpAddr,
		GRPCAddr:     f.grpcAddr,
		RaftAddr:     f.raftAddr,
		EnableDebug:  f.enableDebug,
		HeartbeatTTL: f.heartbeatTTL,
		Raft: &server.RaftConfig{
			DataDir:         f.dataDir,
			BootstrapExpect: bootstrapExpect,
			RetryJoin:       retryJoin,
		},
	}
	if err := cfg.Validate(); err != nil {
		return cfg, usageError{err}
	}
	return cfg, nil
}
