package raft

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	pbstorage "trellis.dev/trellis/api/storage/v1"
	"trellis.dev/trellis/internal/storage"
)

// Catching up with the leader.
//
// A server restarted from its data dir restores its last snapshot, which
// may be minutes old, and applies the rest of the log only once a leader
// has told it what is committed; a follower that was paused is behind by
// whatever it missed. Its store then answers reads with a past state as
// if it were the present, and an agent that takes such a listing stops
// tasks for deletions that did not happen and starts tasks that had
// stopped. So every server asks the leader, about once a second, for its
// read index (ReadIndex: the leader first verifies that it still leads,
// then answers the Raft index its state machine has applied, at or above
// every write it acknowledged) and waits for its own state machine to
// reach it. The state machine's index (fsm.applied), not raft's
// AppliedIndex, which counts entries once they are queued for the state
// machine: during a replay that runs hundreds of entries ahead of the
// store.
//
// Then:
//
//   - until it has once, the server is not caught up since its start, and
//     eventual reads and watches wait for it (up to the hold timeout) and
//     then fail with storage.ErrUnavailable rather than answer with the
//     past (storage.WithStale asks for the local state anyway);
//   - its health (Health) is good only while it hears from a leader and
//     has applied, within catchUpLag, what the leader had committed when
//     last asked.
const (
	// catchUpInterval is how often a follower asks the leader for its
	// read index.
	catchUpInterval = time.Second
	// catchUpLag is how long a follower may take to apply what the
	// leader had committed when asked before it counts as behind.
	catchUpLag = 500 * time.Millisecond
)

// catchUp is what the catch-up loop has learned.
type catchUp struct {
	first     chan struct{} // closed once caught up since the start
	firstOnce sync.Once
	caughtUp  atomic.Bool // the first catch-up happened

	mu sync.Mutex
	// last round: the leader's read index, when it was answered, and
	// whether this server applied it within catchUpLag.
	asked    uint64
	answered time.Time
	behind   bool
	err      error // why the last round failed; nil when it did not
}

func newCatchUp() *catchUp { return &catchUp{first: make(chan struct{})} }

func (c *catchUp) markCaughtUp() {
	c.firstOnce.Do(func() {
		c.caughtUp.Store(true)
		close(c.first)
	})
}

func (c *catchUp) record(asked uint64, answered time.Time, behind bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.err = err
		return
	}
	c.asked, c.answered, c.behind, c.err = asked, answered, behind, nil
}

// runCatchUp asks the leader for its read index every catchUpInterval
// and waits for this server to apply it, until the backend stops. A
// leader is caught up once its barrier is applied (leaderSession).
func (b *Backend) runCatchUp() {
	for {
		changed := b.changed.wait()
		b.catchUpRound()
		first := !b.catch.caughtUp.Load()
		next := catchUpInterval
		if first {
			// Reads are waiting for the first catch-up: try again soon,
			// and at once when the leader changes.
			next = 50 * time.Millisecond
		} else {
			changed = nil
		}
		t := time.NewTimer(next)
		select {
		case <-b.stop:
			t.Stop()
			return
		case <-t.C:
		case <-changed:
			t.Stop()
		}
	}
}

// catchUpRound is one round: ask, then wait for the applied index.
func (b *Backend) catchUpRound() {
	if b.IsLeader() {
		if b.lead.readyIn(b.raft.CurrentTerm()) {
			b.catch.record(b.fsm.applied.Load(), time.Now(), false, nil)
			b.catch.markCaughtUp()
		}
		return
	}
	conn, err := b.leaderConn()
	if err != nil {
		b.catch.record(0, time.Time{}, false, err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), catchUpInterval)
	defer cancel()
	idx, err := b.readIndexRemote(ctx, conn)
	if err != nil {
		b.catch.record(0, time.Time{}, false, err)
		return
	}
	answered := time.Now()
	applied := func() bool { return b.fsm.applied.Load() >= idx }
	deadline := time.NewTimer(catchUpLag)
	defer deadline.Stop()
	switch b.pollUntil(applied, deadline.C, nil) {
	case errPollDeadline:
		b.catch.record(idx, answered, true, nil)
		// Keep waiting for the first catch-up: it is what reads wait on.
		if b.catch.caughtUp.Load() || b.pollUntil(applied, nil, nil) != nil {
			return
		}
	case nil:
		b.catch.record(idx, answered, false, nil)
	default:
		return // stopping
	}
	b.catch.markCaughtUp()
}

// readIndexRemote asks the leader for its read index.
func (b *Backend) readIndexRemote(ctx context.Context, conn *grpc.ClientConn) (uint64, error) {
	resp, err := pbstorage.NewForwardingClient(conn).ReadIndex(ctx, &pbstorage.ReadIndexRequest{})
	if err != nil {
		return 0, notLeader("asking the leader for its read index failed: %v", err)
	}
	if rerr := decodeError(resp.GetError()); rerr != nil {
		return 0, rerr
	}
	return resp.GetIndex(), nil
}

// LeaderIndex is the leader's read index, asked of the leader (which first
// verifies that it still leads): the Raft index its state machine has
// applied, at or above everything acknowledged before the call.
func (b *Backend) LeaderIndex(ctx context.Context) (uint64, error) {
	return onLeader(ctx, b,
		func(ctx context.Context) (uint64, error) {
			if err := b.consistent(ctx); err != nil {
				return 0, err
			}
			return b.fsm.applied.Load(), nil
		},
		b.readIndexRemote)
}

// CaughtUp reports whether this server has caught up with a leader at
// least once since it started.
func (b *Backend) CaughtUp() bool { return b.catch.caughtUp.Load() }

// awaitCaughtUp waits, up to the hold timeout, for the first catch-up,
// unless ctx asks for stale reads.
func (b *Backend) awaitCaughtUp(ctx context.Context) error {
	if b.catch.caughtUp.Load() || storage.StaleFrom(ctx) {
		return nil
	}
	hold := time.NewTimer(b.tuning.HoldTimeout)
	defer hold.Stop()
	select {
	case <-b.catch.first:
		return nil
	case <-hold.C:
		return fmt.Errorf("%w (this server has not caught up with a leader since it started: it has applied up to index %d; ask another server, or read stale)",
			storage.ErrUnavailable, b.fsm.applied.Load())
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", storage.ErrUnavailable, ctx.Err())
	case <-b.stop:
		return ErrShutdown
	}
}

// StoreReadIndex is the index a read of this server's store must reach to
// see every write the cluster acknowledged before the call: it asks the
// leader for its read index (LeaderIndex), waits, as long as ctx lets it,
// until this server's state machine has applied it, and returns it, or
// the store's own index when that is lower (the entries after the store's
// last change changed nothing in it: a refused CAS, a membership change).
// A reader that follows the store (a server's informer) waits for the
// returned index: Consul's consistent mode, answered on any server.
func (b *Backend) StoreReadIndex(ctx context.Context) (uint64, error) {
	idx, err := b.LeaderIndex(ctx)
	if err != nil {
		return 0, err
	}
	switch err := b.pollUntil(func() bool { return b.fsm.applied.Load() >= idx }, nil, ctx.Done()); err {
	case nil:
	case errPollDone:
		return 0, fmt.Errorf("%w: waiting to apply index %d (applied %d): %w", storage.ErrUnavailable, idx, b.fsm.applied.Load(), ctx.Err())
	default:
		return 0, err
	}
	return min(idx, b.store.Index()), nil
}
