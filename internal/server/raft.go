package server

import (
	"context"
	"fmt"
	"io"

	"google.golang.org/grpc"

	"trellis.dev/trellis/internal/cluster"
	"trellis.dev/trellis/internal/httpapi/wire"
	raftstore "trellis.dev/trellis/internal/storage/raft"
)

// openRaft opens this server's Raft node and cluster membership: the
// replicated backend, the forwarding and cluster gRPC services (on the
// server-to-server listener), Raft metrics, and the runnable that forms or
// joins the cluster (it runs after the gRPC servers are up, since
// formation talks to the other servers).
func (s *Server) openRaft(cfg *RaftConfig) error {
	tuning := raftstore.DefaultTuning().Scaled(cfg.RaftMultiplier)
	if cfg.SingleServer {
		tuning = raftstore.DevTuning()
	}
	// hashicorp/raft's own metrics (commit time, FSM apply, replication),
	// installed before the node starts so its first transitions count.
	lib, err := raftstore.LibraryMetrics()
	if err != nil {
		return err
	}
	var dial []grpc.DialOption
	var raftTLS *raftstore.TLS
	if t := s.cfg.TLS; t != nil {
		port, err := t.ServerPort()
		if err != nil {
			return fmt.Errorf("-tls-cert-file: %w", err)
		}
		// Every link of the server ports is tracked (its certificates
		// change kind once the Connect CA is up: tlsutil.ServerPort).
		dial = []grpc.DialOption{grpc.WithTransportCredentials(port.Credentials()), grpc.WithContextDialer(port.Dial)}
		raftTLS = &raftstore.TLS{Incoming: port.Incoming(), Outgoing: port.Outgoing, Track: port.Track}
	}
	c, err := cluster.New(cluster.Config{
		DialOptions:     dial,
		RaftTLS:         raftTLS,
		DataDir:         cfg.DataDir,
		RaftAddr:        s.cfg.RaftAddr,
		ServerAddr:      s.serverLn.Addr().String(),
		BootstrapExpect: cfg.BootstrapExpect,
		RetryJoin:       cfg.RetryJoin,
		Logger:          s.log.With("component", "cluster"),
		Tuning:          tuning,
		Sealed:          s.registry.IsSealed,
	})
	if err != nil {
		return err
	}
	c.RegisterGRPC(s.serverGRPC)
	if err := s.metrics.Register(c.Backend().Metrics()); err != nil {
		_ = c.Shutdown(context.Background())
		return err
	}
	if err := s.metrics.Register(lib); err != nil {
		_ = c.Shutdown(context.Background())
		return err
	}
	s.raft = c
	s.backend = c.Backend()
	st := raftStatus{c: c, datacenter: s.cfg.Datacenter, warnings: s.warnings}
	s.cluster = st
	s.operator = st
	s.Add("raft", c)
	return nil
}

// raftStatus answers the HTTP API's cluster questions from the Raft
// cluster, with errors as gRPC status errors.
type raftStatus struct {
	c          *cluster.Cluster
	datacenter string   // reported by Health
	warnings   []string // reported by Health
}

func (r raftStatus) Leader() string { return r.c.Leader() }

// Health is the Raft backend's judgement (see raftstore.Backend.Health),
// with the leader named by its Raft address.
func (r raftStatus) Health() wire.Health {
	bh := r.c.Backend().Health()
	h := wire.Health{Status: "ok", Leader: r.c.Leader(), Datacenter: r.datacenter, AppliedIndex: bh.Applied, LeaderIndex: bh.LeaderIndex, Warnings: r.warnings}
	if !bh.OK {
		h.Status, h.Error = "unavailable", bh.Reason
	}
	if bh.Leader != "" && bh.LastContact > 0 {
		ms := bh.LastContact.Milliseconds()
		h.LastContactMS = &ms
	}
	return h
}

// Peers returns the Raft addresses of the voters.
func (r raftStatus) Peers() ([]string, error) {
	peers, err := r.c.Peers()
	if err != nil {
		return nil, cluster.ToStatus(err)
	}
	var out []string
	for _, p := range peers {
		if p.Voter {
			out = append(out, p.RaftAddr)
		}
	}
	return out, nil
}

func (r raftStatus) RaftPeers() ([]wire.RaftPeer, error) {
	peers, err := r.c.Peers()
	if err != nil {
		return nil, cluster.ToStatus(err)
	}
	out := make([]wire.RaftPeer, len(peers))
	for i, p := range peers {
		out[i] = wire.RaftPeer{ID: p.ID, RaftAddr: p.RaftAddr, ServerAddr: p.ServerAddr, Voter: p.Voter, Leader: p.Leader}
	}
	return out, nil
}

func (r raftStatus) RemovePeer(ctx context.Context, idOrAddr string) (string, error) {
	id, err := r.c.RemovePeer(ctx, idOrAddr)
	return id, cluster.ToStatus(err)
}

func (r raftStatus) Snapshot(ctx context.Context, w io.Writer) error {
	return cluster.ToStatus(r.c.Snapshot(ctx, w))
}

func (r raftStatus) Restore(ctx context.Context, rd io.Reader) error {
	return cluster.ToStatus(r.c.Restore(ctx, rd))
}
