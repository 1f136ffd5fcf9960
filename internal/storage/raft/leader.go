package raft

import (
	"context"
	"errors"
	"fmt"
	"time"

	hraft "github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	pbresource "trellis.dev/trellis/api/resource/v1"
	pbstorage "trellis.dev/trellis/api/storage/v1"
	"trellis.dev/trellis/internal/backoff"
	"trellis.dev/trellis/internal/storage"
)

// onLeader runs an operation where the leader is: local when this server
// is the leader, remote over a connection to the leader otherwise. Both
// fail with ErrNotLeader only when nothing was done; onLeader then waits
// for a change (a new leader, the leader's address) and tries again, until
// ctx or the hold timeout ends, and fails with storage.ErrUnavailable.
func onLeader[T any](ctx context.Context, b *Backend,
	local func(context.Context) (T, error),
	remote func(context.Context, *grpc.ClientConn) (T, error),
) (T, error) {
	var zero T
	hold := time.NewTimer(b.tuning.HoldTimeout)
	defer hold.Stop()
	// Without jitter: a change of leader wakes every waiter at once
	// anyway, and the timer only bounds how long a missed change is missed.
	pace := backoff.Waiter{Policy: backoff.Policy{Base: 5 * time.Millisecond, Max: 250 * time.Millisecond}}
	for {
		changed := b.changed.wait()
		if b.isShutdown() {
			return zero, ErrShutdown
		}
		var v T
		var err error
		if b.IsLeader() {
			v, err = local(ctx)
		} else if conn, cerr := b.leaderConn(); cerr != nil {
			err = cerr
		} else {
			v, err = remote(ctx, conn)
		}
		if err == nil || !errors.Is(err, ErrNotLeader) {
			return v, err
		}
		retry := time.NewTimer(pace.Next())
		select {
		case <-changed:
		case <-retry.C:
		case <-hold.C:
			retry.Stop()
			return zero, fmt.Errorf("%w (waited %s for a leader: %v)", storage.ErrUnavailable, b.tuning.HoldTimeout, err)
		case <-ctx.Done():
			retry.Stop()
			return zero, fmt.Errorf("%w (%w while waiting for a leader: %v)", storage.ErrUnavailable, ctx.Err(), err)
		case <-b.stop:
			retry.Stop()
			return zero, ErrShutdown
		}
		retry.Stop()
	}
}

// leaderConn returns a connection to the leader's server-to-server port, or
// ErrNotLeader when no leader (or its address) is known.
func (b *Backend) leaderConn() (*grpc.ClientConn, error) {
	id, _ := b.Leader()
	if id == "" {
		return nil, notLeader("no leader is known")
	}
	if id == b.cfg.ID {
		return nil, notLeader("this server is stepping down")
	}
	srv, ok := b.fsm.server(id)
	if !ok {
		return nil, notLeader("the server-to-server address of leader %s is not known yet", id)
	}
	return b.conns.live(srv.ServerAddr)
}

// LeaderConn returns a pooled connection to the leader's server-to-server port, for
// other leader-only services (the cluster service). It fails with
// ErrNotLeader when this server is the leader or knows no leader.
func (b *Backend) LeaderConn() (*grpc.ClientConn, error) {
	if b.IsLeader() {
		return nil, notLeader("this server is the leader")
	}
	return b.leaderConn()
}

// apply puts cmd into the log, where the leader is, and returns its result.
func (b *Backend) apply(ctx context.Context, cmd *pbstorage.Command) ([]*pbresource.Resource, error) {
	if err := checkCommand(cmd); err != nil {
		return nil, err
	}
	return onLeader(ctx, b,
		func(ctx context.Context) ([]*pbresource.Resource, error) { return b.applyLocal(ctx, cmd) },
		func(ctx context.Context, conn *grpc.ClientConn) ([]*pbresource.Resource, error) {
			return b.applyRemote(ctx, conn, cmd)
		})
}

// applyLocal applies cmd through this server's Raft node, which must be the
// leader, and waits until it is committed and applied here. The error is
// the operation's (a CAS failure, ...), ErrNotLeader when raft refused the
// entry before appending it, or an outcome-unknown error.
func (b *Backend) applyLocal(ctx context.Context, cmd *pbstorage.Command) ([]*pbresource.Resource, error) {
	data, err := proto.Marshal(cmd)
	if err != nil {
		return nil, invalid("encoding command: %v", err)
	}
	if b.isShutdown() {
		return nil, ErrShutdown
	}
	b.gate.RLock()
	start := time.Now()
	f := b.raft.Apply(data, 0)
	done := make(chan error, 1)
	go func() {
		// The gate stays held until raft answers, even when the caller
		// gives up, so a restore never overlaps a write.
		defer b.gate.RUnlock()
		done <- f.Error()
	}()
	select {
	case err = <-done:
	case <-ctx.Done():
		return nil, outcomeUnknown("the caller gave up while the write was in flight", ctx.Err())
	}
	op := opName(cmd)
	if err != nil {
		b.metrics.applyErrors.WithLabelValues(op).Inc()
		return nil, classifyApplyError(err)
	}
	b.metrics.apply.WithLabelValues(op).Observe(time.Since(start).Seconds())
	if b.nudge != nil {
		b.nudge.applied(f.Index())
	}
	res, ok := f.Response().(*applyResult)
	if !ok {
		return nil, fmt.Errorf("unexpected apply response %T", f.Response())
	}
	return res.resources, res.err
}

// classifyApplyError says whether a failed raft.Apply did nothing (the
// entry never reached the log: retry at the leader) or may have committed.
func classifyApplyError(err error) error {
	switch {
	case errors.Is(err, hraft.ErrNotLeader):
		return notLeader("raft refused the entry: %v", err)
	case errors.Is(err, hraft.ErrLeadershipTransferInProgress):
		return notLeader("raft refused the entry during a leadership transfer: %v", err)
	case errors.Is(err, hraft.ErrEnqueueTimeout):
		return notLeader("raft did not take the entry in time: %v", err)
	case errors.Is(err, hraft.ErrLeadershipLost):
		return outcomeUnknown("leadership was lost after the entry entered the log", err)
	case errors.Is(err, hraft.ErrAbortedByRestore):
		return outcomeUnknown("a snapshot restore aborted the entry", err)
	case errors.Is(err, hraft.ErrRaftShutdown):
		return outcomeUnknown("the server shut down while the entry was in flight", err)
	}
	return outcomeUnknown("raft failed the entry", err)
}

// consistent makes a following local read linearizable: this server is
// the leader, has applied everything committed before its term (its
// leader session's barrier), and is still the leader of that same term
// after a round of heartbeats (VerifyLeader), so no other leader can have
// acknowledged a write it has not applied. Writes this leader acknowledged
// were applied before they were acknowledged.
func (b *Backend) consistent(ctx context.Context) error {
	if !b.IsLeader() {
		return notLeader("this server is not the leader")
	}
	term := b.raft.CurrentTerm()
	if !b.lead.readyIn(term) {
		return notLeader("this leader has not caught up yet")
	}
	f := b.raft.VerifyLeader()
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		if err != nil {
			// A read has no effect, so any failure here is safe to retry.
			return notLeader("leadership could not be verified: %v", err)
		}
		if b.raft.CurrentTerm() != term {
			return notLeader("the term changed while verifying leadership")
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", storage.ErrUnavailable, ctx.Err())
	}
}

// ServerAddrs returns the server-to-server addresses of the servers the
// cluster knows (this one's too), for parts that ask a server other than
// the leader (a task's logs, from the server its agent is attached to).
func (b *Backend) ServerAddrs() []string {
	list := b.fsm.serverList()
	out := make([]string, 0, len(list))
	for _, s := range list {
		if s.GetServerAddr() != "" {
			out = append(out, s.GetServerAddr())
		}
	}
	return out
}

// ServerConn returns a pooled connection to the server-to-server port at
// addr (do not close it).
func (b *Backend) ServerConn(addr string) (*grpc.ClientConn, error) { return b.conns.live(addr) }
