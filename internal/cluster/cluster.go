package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc"

	pbcluster "trellis.dev/trellis/api/cluster/v1"
	"trellis.dev/trellis/internal/storage"
	raftstore "trellis.dev/trellis/internal/storage/raft"
)

var (
	// ErrPeerNotFound: RemovePeer named no server of the configuration.
	ErrPeerNotFound = errors.New("no such server in the cluster")
	// ErrNoLeader wraps storage.ErrUnavailable: the request needs the
	// leader and none is known right now; retry.
	ErrNoLeader = fmt.Errorf("%w: no leader to serve a membership request", storage.ErrUnavailable)
)

// Cluster is one server's membership in a Trellis server cluster: its
// replicated storage backend and how it forms, joins and changes the
// cluster.
type Cluster struct {
	cfg    Config
	logger *slog.Logger
	b      *raftstore.Backend
	self   peer
	disc   *discovery
	// learned is signalled when an Info request taught discovery something.
	learned chan struct{}

	dial     []grpc.DialOption
	connMu   sync.Mutex
	joinConn map[string]*grpc.ClientConn // retry-join targets

	stop     chan struct{}
	stopOnce sync.Once
}

// Peer is a server of the cluster as this server sees it.
type Peer struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	// ServerAddr is "" until the server has registered its addresses.
	ServerAddr string `json:"server_addr"`
	Voter      bool   `json:"voter"`
	Leader     bool   `json:"leader"`
}

// New opens this server's node id and Raft state and starts its Raft node.
// It does not form or join a cluster: register the gRPC services
// (RegisterGRPC), start serving gRPC, then call Run.
func New(cfg Config) (*Cluster, error) {
	cfg, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	id, err := loadNodeID(cfg.DataDir, cfg.NodeID)
	if err != nil {
		return nil, err
	}
	logger := cfg.Logger.With("node_id", id)
	b, err := raftstore.Open(raftstore.Config{
		ID:                id,
		DataDir:           cfg.DataDir,
		RaftAddr:          cfg.RaftAddr,
		RaftAdvertiseAddr: cfg.RaftAdvertiseAddr,
		ServerAddr:        cfg.ServerAddr,
		Logger:            logger,
		Tuning:            cfg.Tuning,
		StoreOptions:      cfg.StoreOptions,
		DialOptions:       cfg.DialOptions,
		TLS:               cfg.RaftTLS,
		Sealed:            cfg.Sealed,
	})
	if err != nil {
		return nil, err
	}
	self := peer{ID: id, RaftAddr: b.RaftAddr(), ServerAddr: cfg.ServerAddr, Expect: cfg.BootstrapExpect}
	dial := cfg.DialOptions
	if len(dial) == 0 {
		dial = defaultDialOptions()
	}
	return &Cluster{
		cfg:      cfg,
		logger:   logger,
		b:        b,
		self:     self,
		disc:     newDiscovery(self),
		learned:  make(chan struct{}, 1),
		dial:     dial,
		joinConn: map[string]*grpc.ClientConn{},
		stop:     make(chan struct{}),
	}, nil
}

// Backend is the replicated storage backend (storage.Backend and
// storage.Leadership) for the resource service and the controllers.
func (c *Cluster) Backend() *raftstore.Backend { return c.b }

// ID is this server's node id.
func (c *Cluster) ID() string { return c.self.ID }

// RegisterGRPC mounts the cluster service and the storage forwarding
// service on the server's server-to-server gRPC server (never the public
// one: forwarding skips validation and ACL hooks, and membership is for
// servers only).
func (c *Cluster) RegisterGRPC(s *grpc.Server) {
	pbcluster.RegisterClusterServer(s, &service{c: c})
	c.b.RegisterGRPC(s)
}

// Run forms or joins a cluster when this server has no state yet, then
// keeps this server's membership record current (its addresses, a new
// Raft address after a restart), until ctx ends or Shutdown is called. It
// returns nil then.
func (c *Cluster) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-c.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	if !c.b.HasState() {
		c.form(ctx)
	}
	c.maintain(ctx)
	return nil
}

// Start is Run followed by Shutdown: it blocks until ctx ends, then stops
// this server's Raft node (handing leadership over first) within
// StopTimeout. It is the shape of a long-lived part of the server process.
func (c *Cluster) Start(ctx context.Context) error {
	err := c.Run(ctx)
	sctx, cancel := context.WithTimeout(context.Background(), StopTimeout)
	defer cancel()
	if serr := c.Shutdown(sctx); serr != nil && err == nil {
		err = serr
	}
	return err
}

// StopTimeout bounds Start's shutdown.
const StopTimeout = 10 * time.Second

// WaitReady blocks until a leader is known and this server can serve every
// request through it.
func (c *Cluster) WaitReady(ctx context.Context) error { return c.b.WaitReady(ctx) }

// Ready reports whether a leader is known and this server can serve every
// request through it (for /v1/health).
func (c *Cluster) Ready() bool { return c.b.Ready() }

// Leader returns the leader's Raft address, "" when none is known.
func (c *Cluster) Leader() string {
	_, addr := c.b.Leader()
	return addr
}

// Peers lists the servers of the Raft configuration known here, ordered by
// id.
func (c *Cluster) Peers() ([]Peer, error) {
	members, err := c.b.Members()
	if err != nil {
		return nil, err
	}
	out := make([]Peer, len(members))
	for i, m := range members {
		out[i] = Peer{ID: m.ID, RaftAddr: m.RaftAddr, ServerAddr: m.ServerAddr, Voter: m.Voter, Leader: m.Leader}
	}
	return out, nil
}

// RemovePeer removes the server with this id or Raft address from the
// cluster (through the leader) and returns its id. Remove servers that are
// gone for good; a removed server that is still running stays out until
// it is restarted with an empty data dir.
func (c *Cluster) RemovePeer(ctx context.Context, idOrAddr string) (string, error) {
	if idOrAddr == "" {
		return "", fmt.Errorf("%w: the server to remove is not named", raftstore.ErrInvalidRequest)
	}
	if c.b.IsLeader() {
		return c.removeLocal(ctx, idOrAddr)
	}
	conn, err := c.b.LeaderConn()
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrNoLeader, err)
	}
	resp, err := pbcluster.NewClusterClient(conn).RemovePeer(ctx, &pbcluster.RemovePeerRequest{IdOrAddress: idOrAddr, Forwarded: true})
	if err != nil {
		return "", fromStatus(err)
	}
	return resp.GetId(), nil
}

// Snapshot writes the cluster's state to w (trellis snapshot save).
func (c *Cluster) Snapshot(ctx context.Context, w io.Writer) error { return c.b.Snapshot(ctx, w) }

// Restore replaces the state of every server with a snapshot file
// (trellis snapshot restore). A bad file changes nothing.
func (c *Cluster) Restore(ctx context.Context, r io.Reader) error { return c.b.Restore(ctx, r) }

// Shutdown stops this server: it hands leadership to another voter first
// when it leads (so the cluster does not wait for an election timeout),
// then stops Raft. It gives up waiting when ctx ends.
func (c *Cluster) Shutdown(ctx context.Context) error {
	c.stopOnce.Do(func() { close(c.stop) })
	if c.b.IsLeader() && c.otherVoters() {
		tctx, cancel := context.WithTimeout(ctx, transferTimeout)
		if err := c.b.TransferLeadership(tctx); err != nil {
			c.logger.Warn("leadership transfer before shutdown failed", "error", err)
		}
		cancel()
	}
	done := make(chan error, 1)
	go func() { done <- c.b.Shutdown() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		err = fmt.Errorf("shutdown did not finish: %w", ctx.Err())
	}
	c.connMu.Lock()
	for _, conn := range c.joinConn {
		_ = conn.Close()
	}
	c.joinConn = map[string]*grpc.ClientConn{}
	c.connMu.Unlock()
	return err
}

func (c *Cluster) otherVoters() bool {
	members, err := c.b.Members()
	if err != nil {
		return false
	}
	for _, m := range members {
		if m.Voter && m.ID != c.self.ID {
			return true
		}
	}
	return false
}

// transferTimeout bounds the leadership hand-over at shutdown.
const transferTimeout = 5 * time.Second
