package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"trellis.dev/trellis/bench/internal/report"

	"github.com/anishathalye/porcupine"

	"trellis.dev/trellis/internal/testcluster"
	"trellis.dev/trellis/internal/testcluster/lincheck"
)

// keysPerRound: each kill's writes go to keys of their own, so that a
// write of unknown outcome (it may take effect at any later time) makes
// only its own round's history harder to check.
const keysPerRound = 4

// kill is what one leader kill measured.
type kill struct {
	leader string
	// elected is the kill → every survivor names the same new leader,
	// seen by polling /v1/status/leader every 20 ms.
	elected time.Duration
	// firstWrite is the kill → the first write acknowledged of those
	// sent after the kill (so the new leader committed it).
	firstWrite time.Duration
	// unknown counts writes whose outcome their writer could not know,
	// from the kill to the first acknowledgement.
	unknown int
}

// writesResult is the writes cell's outcome.
type writesResult struct {
	kills []kill
	// unprompted counts leader changes no kill caused: the leader found
	// before a kill was not the one elected after the previous kill.
	unprompted int
	acked      int64
	unknown    int64
	ops        int
	check      porcupine.CheckResult
	vis        string
}

// writeLoad is the writers' shared state: the round (which keys they
// write), and the first acknowledgement of a write sent after the kill.
type writeLoad struct {
	c       *testcluster.Cluster
	h       *lincheck.History
	round   atomic.Int64
	acked   atomic.Int64
	unknown atomic.Int64

	mu       sync.Mutex
	killedAt time.Time // zero when no kill is being timed
	firstAck time.Time
	ackedCh  chan struct{} // closed at the first acknowledgement after killedAt
}

// armKill starts timing a kill that happened at t.
func (w *writeLoad) armKill(t time.Time) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.killedAt, w.firstAck = t, time.Time{}
	w.ackedCh = make(chan struct{})
	return w.ackedCh
}

// acknowledged records a write sent at sent and acknowledged at at.
func (w *writeLoad) acknowledged(sent, at time.Time) {
	w.acked.Add(1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.killedAt.IsZero() || !w.firstAck.IsZero() || sent.Before(w.killedAt) {
		return
	}
	w.firstAck = at
	close(w.ackedCh)
}

func (w *writeLoad) firstAckAfterKill() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.firstAck.Sub(w.killedAt)
}

// writer writes unique values to its round's keys through one server
// after another: it starts on server id % n and moves to the next when a
// write fails or the server is not running, as a client behind a load
// balancer would be moved.
func (w *writeLoad) writer(ctx context.Context, id int, fatal func(error)) {
	ms := w.c.Members
	target := id % len(ms)
	failed := 0
	for seq := 0; ctx.Err() == nil; seq++ {
		m := ms[target]
		if !m.Running() {
			target = (target + 1) % len(ms)
			continue
		}
		round := w.round.Load()
		key := fmt.Sprintf("r%d-k%d", round, (id+seq)%keysPerRound)
		sent := time.Now()
		err := w.h.Put(id, m.HTTPAddr, key, fmt.Sprintf("w%d-%d", id, seq))
		switch {
		case err == nil:
			w.acknowledged(sent, time.Now())
			failed = 0
			continue
		case errors.Is(err, lincheck.ErrUnknown):
			w.unknown.Add(1)
		case errors.Is(err, lincheck.ErrNotApplied):
		default:
			fatal(fmt.Errorf("writer %d on %s: %w", id, m.Name, err))
			return
		}
		// Refused at once (a server starting, its port not open yet):
		// move on, and pause once every server has refused in a row.
		target = (target + 1) % len(ms)
		if failed++; failed >= len(ms) {
			failed = 0
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
}

// writesCell starts 3 servers, runs writers through all of them, and
// kills the leader b.kills times with SIGKILL, restarting it each time
// from its data directory once the new leader has taken writes. At the
// end, strong reads of every key join the history, which must be
// linearizable: no acknowledged write lost.
func (b *bench) writesCell(ctx context.Context) (*writesResult, error) {
	dir := b.cellDir("writes")
	c, err := testcluster.Start(ctx, testcluster.Options{Bin: b.trellis, Dir: dir, Servers: 3, Extra: b.serverFlags})
	if err != nil {
		return nil, err
	}
	defer c.Stop()
	w := &writeLoad{c: c, h: lincheck.NewHistory()}
	wctx, stopWriters := context.WithCancel(ctx)
	defer stopWriters()
	var wg sync.WaitGroup
	var fatalErr atomic.Pointer[error]
	fatal := func(err error) {
		fatalErr.CompareAndSwap(nil, &err)
		stopWriters()
	}
	for id := range b.writers {
		wg.Add(1)
		go func() { defer wg.Done(); w.writer(wctx, id, fatal) }()
	}
	// waitAcked waits for n more acknowledged writes: writes flow.
	waitAcked := func(n int64) error {
		want := w.acked.Load() + n
		return testcluster.WaitFor(wctx, 60*time.Second, func() bool { return w.acked.Load() >= want })
	}

	r := &writesResult{}
	var elected string // the leader the last kill elected
	checkLeader := func() (*testcluster.Member, error) {
		leader, err := c.WaitLeader(ctx, c.Members)
		if err != nil {
			return nil, err
		}
		if elected != "" && leader.RaftAddr != elected {
			r.unprompted++
			fmt.Fprintf(b.progress, "failoverbench: the leader changed to %s with no kill\n", leader.Name)
		}
		elected = leader.RaftAddr
		return leader, nil
	}
	for i := range b.kills {
		if err := waitAcked(int64(b.settleWrites)); err != nil {
			return nil, fmt.Errorf("kill %d: writes do not flow: %w", i+1, err)
		}
		leader, err := checkLeader()
		if err != nil {
			return nil, err
		}
		w.round.Store(int64(i + 1))
		if err := waitAcked(int64(b.settleWrites)); err != nil {
			return nil, fmt.Errorf("kill %d: writes do not flow: %w", i+1, err)
		}
		unknown0 := w.unknown.Load()
		leader.Kill()
		killedAt := time.Now()
		acked := w.armKill(killedAt)
		var survivors []*testcluster.Member
		for _, m := range c.Members {
			if m != leader {
				survivors = append(survivors, m)
			}
		}
		k := kill{leader: leader.Name}
		if err := pollEvery(wctx, 60*time.Second, 20*time.Millisecond, func() bool {
			elected = agreedLeader(survivors)
			return elected != ""
		}); err != nil {
			return nil, fmt.Errorf("kill %d: the survivors agree on no leader: %w", i+1, err)
		}
		k.elected = time.Since(killedAt)
		select {
		case <-acked:
		case <-time.After(60 * time.Second):
			return nil, fmt.Errorf("kill %d: no write acknowledged within 60 s", i+1)
		case <-wctx.Done():
			return nil, fmt.Errorf("kill %d: %w", i+1, context.Cause(wctx))
		}
		k.firstWrite = w.firstAckAfterKill()
		k.unknown = int(w.unknown.Load() - unknown0)
		r.kills = append(r.kills, k)
		fmt.Fprintf(b.progress, "failoverbench: kill %d of %s: new leader agreed after %s, first write acknowledged after %s\n",
			i+1, leader.Name, report.Round(k.elected), report.Round(k.firstWrite))
		if err := leader.Start(); err != nil {
			return nil, err
		}
	}
	if err := waitAcked(int64(b.settleWrites)); err != nil {
		return nil, fmt.Errorf("after the last kill: writes do not flow: %w", err)
	}
	stopWriters()
	wg.Wait()
	if p := fatalErr.Load(); p != nil {
		return nil, *p
	}
	if _, err := checkLeader(); err != nil {
		return nil, err
	}
	// Final strong reads, through every server, of every key written.
	for _, m := range c.Members {
		for round := range b.kills + 1 {
			for k := range keysPerRound {
				key := fmt.Sprintf("r%d-k%d", round, k)
				if _, err := w.h.Get(b.writers, m.HTTPAddr, key, true); err != nil {
					return nil, fmt.Errorf("final read of %s on %s: %w", key, m.Name, err)
				}
			}
		}
	}
	r.acked, r.unknown, r.ops = w.acked.Load(), w.unknown.Load(), w.h.Len()
	fmt.Fprintf(b.progress, "failoverbench: checking %d operations\n", r.ops)
	r.check, r.vis = w.h.Check(10 * time.Minute)
	return r, nil
}

// agreedLeader is the Raft address of the leader every member names, one
// of them, or "" when they do not agree on one.
func agreedLeader(ms []*testcluster.Member) string {
	var addr string
	for _, m := range ms {
		l, err := m.Leader()
		if err != nil || l == "" || (addr != "" && l != addr) {
			return ""
		}
		addr = l
	}
	for _, m := range ms {
		if m.RaftAddr == addr {
			return addr
		}
	}
	return ""
}
