package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"

	pbcluster "trellis.dev/trellis/api/cluster/v1"
	"trellis.dev/trellis/internal/backoff"
	raftstore "trellis.dev/trellis/internal/storage/raft"
)

// form runs while this server has no Raft state: it asks the retry-join
// servers about themselves (telling them about itself), and bootstraps or
// joins as decideFormation says, retrying with backoff.
func (c *Cluster) form(ctx context.Context) {
	c.logger.Info("forming or joining a cluster", "bootstrap_expect", c.cfg.BootstrapExpect, "retry_join", c.cfg.RetryJoin)
	// The wait grows only when it ran out: news from a peer or of this
	// server's Raft state is worth a prompt look without backing off.
	pace := backoff.Policy{Base: c.cfg.RetryInterval, Max: c.cfg.RetryMaxInterval}
	expired := 0
	lastReason := ""
	for {
		if c.b.HasState() {
			return
		}
		c.probe(ctx)
		d := decideFormation(c.disc.state())
		switch {
		case d.Bootstrap != nil:
			err := c.b.Bootstrap(d.Bootstrap)
			if err == nil || errors.Is(err, raftstore.ErrAlreadyBootstrapped) {
				return
			}
			c.logger.Error("bootstrap failed", "error", err)
		case d.JoinVia != nil:
			if c.joinVia(ctx, d.JoinVia) {
				// The leader now replicates to this server; its state
				// arrives shortly.
				if c.waitForState(ctx, 10*time.Second) {
					return
				}
			}
		default:
			if d.Wait != lastReason {
				c.logger.Info("not in a cluster yet", "reason", d.Wait)
				lastReason = d.Wait
			}
		}
		t := time.NewTimer(pace.Ceiling(expired + 1))
		select {
		case <-t.C:
			expired++
		case <-c.learned:
			t.Stop()
		case <-c.b.Changed():
			t.Stop()
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// probe exchanges Info with every retry-join server.
func (c *Cluster) probe(ctx context.Context) {
	req := &pbcluster.InfoRequest{From: c.self.proto(), Known: c.disc.knownFresh(), FromHasState: c.b.HasState()}
	for _, addr := range c.cfg.RetryJoin {
		if addr == c.self.ServerAddr {
			continue
		}
		conn, err := c.conn(addr)
		if err != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := pbcluster.NewClusterClient(conn).Info(cctx, req)
		cancel()
		if err != nil {
			c.logger.Debug("retry-join server did not answer", "addr", addr, "error", err)
			continue
		}
		other := peerFrom(resp.GetServer())
		if other.ID == c.self.ID {
			continue // our own address under another name
		}
		if other.ServerAddr == "" {
			other.ServerAddr = addr
		}
		c.disc.learn(other, resp.GetHasState(), resp.GetKnown())
	}
}

// joinVia asks the servers at addrs, in turn, to make this server a voter.
func (c *Cluster) joinVia(ctx context.Context, addrs []string) bool {
	req := &pbcluster.JoinRequest{Server: c.self.proto()}
	for _, addr := range addrs {
		conn, err := c.conn(addr)
		if err != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err = pbcluster.NewClusterClient(conn).Join(cctx, req)
		cancel()
		if err == nil {
			c.logger.Info("joined the cluster", "via", addr)
			return true
		}
		c.logger.Info("join attempt failed", "via", addr, "error", err)
	}
	return false
}

func (c *Cluster) waitForState(ctx context.Context, within time.Duration) bool {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		ch := c.b.Changed()
		if c.b.HasState() {
			return true
		}
		poll := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ch:
		case <-poll.C:
		case <-deadline.C:
			poll.Stop()
			return false
		case <-ctx.Done():
			poll.Stop()
			return false
		}
		poll.Stop()
	}
}

// conn returns a connection to a retry-join server.
func (c *Cluster) conn(addr string) (*grpc.ClientConn, error) {
	c.connMu.Lock()
	defer c.connMu.Unlock()
	if conn, ok := c.joinConn[addr]; ok {
		return conn, nil
	}
	conn, err := grpc.NewClient(addr, c.dial...)
	if err != nil {
		c.logger.Warn("cannot dial retry-join server", "addr", addr, "error", err)
		return nil, err
	}
	c.joinConn[addr] = conn
	return conn, nil
}

// maintain keeps this server's membership current while it runs: when the
// configuration has it at another Raft address, as a non-voter, or the
// registry lacks its current addresses, it asks the leader to (re)admit
// it. A server that is not in the configuration at all was removed and
// stays out.
func (c *Cluster) maintain(ctx context.Context) {
	retryWait := backoff.Waiter{Policy: backoff.Policy{Base: c.cfg.RetryInterval, Max: c.cfg.RetryMaxInterval}}
	warnedRemoved := false
	for {
		ch := c.b.Changed()
		retry := false
		switch need, moved, removed := c.needsJoin(); {
		case removed:
			if !warnedRemoved {
				c.logger.Warn("this server is not in the cluster configuration (it was removed); restart it with an empty data dir to join again")
				warnedRemoved = true
			}
		case need:
			warnedRemoved = false
			if !c.rejoin(ctx, moved) {
				retry = true
			} else {
				retryWait.Reset()
			}
		default:
			warnedRemoved = false
		}
		var timer <-chan time.Time
		var t *time.Timer
		if retry {
			t = time.NewTimer(retryWait.Next())
			timer = t.C
		}
		select {
		case <-ch:
		case <-timer:
		case <-ctx.Done():
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// needsJoin compares this server with the configuration and registry as
// this server knows them: whether it needs (re)admitting, whether that is
// because its Raft address moved, and whether it was removed.
func (c *Cluster) needsJoin() (need, moved, removed bool) {
	members, err := c.b.Members()
	if err != nil || len(members) == 0 {
		return false, false, false
	}
	self := c.b.Self()
	for _, m := range members {
		if m.ID != self.ID {
			continue
		}
		moved = m.RaftAddr != self.RaftAddr
		if c.b.IsLeader() {
			// The backend records the leader's addresses itself; only a
			// moved Raft address needs fixing in the configuration.
			return moved, moved, false
		}
		rec, ok := c.b.ServerRecord(self.ID)
		return moved || !m.Voter || !ok || rec != self, moved, false
	}
	return false, false, true
}

// rejoin sends a Join for this server to the leader. When no leader is
// known and this server's Raft address moved (the leader cannot reach it
// to tell it who leads), it goes through the retry-join servers instead.
// Otherwise it waits for a leader: right after a restart, the registry
// seems stale only until this server has caught up with the log.
func (c *Cluster) rejoin(ctx context.Context, moved bool) bool {
	if c.b.IsLeader() {
		if err := c.b.AddVoter(ctx, c.b.Self()); err != nil {
			c.logger.Warn("recording this leader's new Raft address failed", "error", err)
			return false
		}
		return true
	}
	if conn, err := c.b.LeaderConn(); err == nil {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_, err := pbcluster.NewClusterClient(conn).Join(cctx, &pbcluster.JoinRequest{Server: c.self.proto(), Forwarded: true})
		if err == nil {
			return true
		}
		c.logger.Info("updating this server's membership failed", "error", err)
		return false
	}
	if id, _ := c.b.Leader(); id != "" || !moved {
		return false
	}
	return c.joinVia(ctx, c.cfg.RetryJoin)
}

// joinLocal admits s on the leader.
func (c *Cluster) joinLocal(ctx context.Context, s raftstore.Server) error {
	members, err := c.b.Members()
	if err != nil {
		return err
	}
	rec, recOK := c.b.ServerRecord(s.ID)
	plan := planJoin(members, s, rec, recOK)
	for _, id := range plan.Remove {
		c.logger.Info("removing a stale server at a joining server's address", "removed", id, "joining", s.ID)
		if err := c.b.RemoveServer(ctx, id); err != nil {
			return fmt.Errorf("removing stale server %s: %w", id, err)
		}
		if err := c.b.DeregisterServer(ctx, id); err != nil {
			return fmt.Errorf("removing stale server %s: %w", id, err)
		}
	}
	if plan.Register {
		if err := c.b.RegisterServer(ctx, s); err != nil {
			return fmt.Errorf("recording server %s: %w", s.ID, err)
		}
	}
	if plan.AddVoter {
		c.logger.Info("adding a voter", "id", s.ID, "raft_addr", s.RaftAddr)
		if err := c.b.AddVoter(ctx, s); err != nil {
			return fmt.Errorf("adding voter %s: %w", s.ID, err)
		}
	}
	return nil
}

// removeLocal removes a server on the leader.
func (c *Cluster) removeLocal(ctx context.Context, idOrAddr string) (string, error) {
	members, err := c.b.Members()
	if err != nil {
		return "", err
	}
	for _, m := range members {
		if m.ID != idOrAddr && m.RaftAddr != idOrAddr {
			continue
		}
		c.logger.Info("removing a server", "id", m.ID, "raft_addr", m.RaftAddr)
		// The record goes first: removing the leader itself ends its
		// leadership, after which it could not drop the record.
		if err := c.b.DeregisterServer(ctx, m.ID); err != nil {
			return "", err
		}
		if err := c.b.RemoveServer(ctx, m.ID); err != nil {
			return "", err
		}
		return m.ID, nil
	}
	return "", fmt.Errorf("%w: %q is neither the id nor the raft address of a server", ErrPeerNotFound, idOrAddr)
}
