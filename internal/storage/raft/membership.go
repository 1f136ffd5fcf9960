package raft

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	hraft "github.com/hashicorp/raft"

	"trellis.dev/trellis/internal/storage"
)

// ErrAlreadyBootstrapped: Bootstrap was called on a server with Raft state.
var ErrAlreadyBootstrapped = errors.New("this server already has raft state")

// Bootstrap makes this server part of a new cluster of exactly servers
// (this one among them). Every server of the new cluster must be
// bootstrapped with the same list, or none but one.
func (b *Backend) Bootstrap(servers []Server) error {
	cfg := hraft.Configuration{}
	self := false
	for _, s := range servers {
		if s.ID == "" || s.RaftAddr == "" {
			return invalid("bootstrap: every server needs an id and a raft address")
		}
		self = self || s.ID == b.cfg.ID
		cfg.Servers = append(cfg.Servers, hraft.Server{Suffrage: hraft.Voter, ID: hraft.ServerID(s.ID), Address: hraft.ServerAddress(s.RaftAddr)})
	}
	if !self {
		return invalid("bootstrap: the server list does not include this server (%s)", b.cfg.ID)
	}
	if err := b.raft.BootstrapCluster(cfg).Error(); err != nil {
		if errors.Is(err, hraft.ErrCantBootstrap) {
			return ErrAlreadyBootstrapped
		}
		return fmt.Errorf("bootstrap: %w", err)
	}
	b.logger.Info("bootstrapped a new raft cluster", "servers", len(servers))
	return nil
}

// Member is a server of the Raft configuration as this server sees it.
type Member struct {
	ID       string
	RaftAddr string
	// ServerAddr is "" until the server's addresses are recorded.
	ServerAddr string
	Voter      bool
	Leader     bool
}

// Members lists the latest Raft configuration known here, ordered by id.
func (b *Backend) Members() ([]Member, error) {
	f := b.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	leaderID, _ := b.Leader()
	var out []Member
	for _, s := range f.Configuration().Servers {
		m := Member{
			ID:       string(s.ID),
			RaftAddr: string(s.Address),
			Voter:    s.Suffrage == hraft.Voter,
			Leader:   string(s.ID) == leaderID,
		}
		if rec, ok := b.fsm.server(m.ID); ok {
			m.ServerAddr = rec.ServerAddr
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// ServerRecord returns the registry record of a server: the addresses it
// last registered.
func (b *Backend) ServerRecord(id string) (Server, bool) { return b.fsm.server(id) }

// AddVoter adds s to the Raft configuration as a voter (leader only).
func (b *Backend) AddVoter(ctx context.Context, s Server) error {
	if s.ID == "" || s.RaftAddr == "" {
		return invalid("add voter: id and raft address are required")
	}
	return b.configChange(ctx, func() hraft.IndexFuture {
		return b.raft.AddVoter(hraft.ServerID(s.ID), hraft.ServerAddress(s.RaftAddr), 0, 0)
	})
}

// RemoveServer removes a server from the Raft configuration (leader only).
func (b *Backend) RemoveServer(ctx context.Context, id string) error {
	return b.configChange(ctx, func() hraft.IndexFuture {
		return b.raft.RemoveServer(hraft.ServerID(id), 0, 0)
	})
}

// RegisterServer records a server's addresses in the replicated registry
// (leader only).
func (b *Backend) RegisterServer(ctx context.Context, s Server) error {
	if !b.IsLeader() {
		return notLeader("%s is not the leader", b.cfg.ID)
	}
	cmd := registerCommand(s)
	if err := checkCommand(cmd); err != nil {
		return err
	}
	_, err := b.applyLocal(ctx, cmd)
	return err
}

// DeregisterServer drops a server's registry record (leader only).
func (b *Backend) DeregisterServer(ctx context.Context, id string) error {
	if !b.IsLeader() {
		return notLeader("%s is not the leader", b.cfg.ID)
	}
	_, err := b.applyLocal(ctx, deregisterCommand(id))
	return err
}

// TransferLeadership asks raft to hand leadership to another voter and
// waits for it (leader only).
func (b *Backend) TransferLeadership(ctx context.Context) error {
	if !b.IsLeader() {
		return notLeader("%s is not the leader", b.cfg.ID)
	}
	return waitFuture(ctx, b.raft.LeadershipTransfer())
}

func (b *Backend) configChange(ctx context.Context, change func() hraft.IndexFuture) error {
	if !b.IsLeader() {
		return notLeader("%s is not the leader", b.cfg.ID)
	}
	b.gate.RLock()
	defer b.gate.RUnlock()
	err := waitFuture(ctx, change())
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return outcomeUnknown("the caller gave up while the configuration change was in flight", ctx.Err())
	}
	return classifyApplyError(err)
}

// waitFuture waits for f or the end of ctx.
func waitFuture(ctx context.Context, f hraft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", storage.ErrUnavailable, ctx.Err())
	}
}
