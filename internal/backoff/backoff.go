// Package backoff is the one exponential backoff of Trellis: the wait
// before the next attempt after a run of consecutive failures. The
// controller work queue and informers, the Raft backend's leader session
// and its wait for a leader, cluster formation and membership upkeep, the
// server's bootstrap of what must exist, the watched sets
// (resource.WatchedSet) and the agent's reconnects all use it.
//
// Design decisions:
//
//   - The delay is a pure function of the policy, the number of
//     consecutive failures and a random draw (Policy.Delay), so that its
//     bounds are tested by tables and callers inject the randomness.
//   - Jitter draws from the upper half of the ceiling, [ceiling/2,
//     ceiling): the wait still grows with each failure, but many callers
//     that failed together (agents that lost the same server, requests
//     that hit the same conflict) do not retry together.
//   - Waiter is the small stateful helper for a retry loop: it counts the
//     failures, and sleeps on the time package's timers, which
//     testing/synctest fakes. Loops that also wake on other events use
//     Waiter.Next for the delay and their own select.
package backoff

import (
	"context"
	"time"
)

// Policy bounds a backoff: Base after the first failure, doubling with
// each further one, never above Max.
type Policy struct {
	Base time.Duration
	Max  time.Duration
}

// Poll paces a wait for a state that nothing notifies (an applied index,
// a view's index): checked after 1 ms at first, doubling to every 50 ms.
var Poll = Policy{Base: time.Millisecond, Max: 50 * time.Millisecond}

// Ceiling is the un-jittered delay after failures consecutive failures
// (failures < 1 counts as the first): Base·2^(failures-1), capped at Max.
// It does not overflow however many failures there were.
func (p Policy) Ceiling(failures int) time.Duration {
	if failures < 1 {
		failures = 1
	}
	d := p.Base
	for i := 1; i < failures; i++ {
		if d >= p.Max/2 {
			return p.Max
		}
		d *= 2
	}
	return min(d, p.Max)
}

// Delay returns how long to wait before the attempt that follows the
// failures-th consecutive failure: the Ceiling scaled by a jitter factor in
// [1/2, 1) drawn from r, which is in [0, 1) (values outside are clamped).
func (p Policy) Delay(failures int, r float64) time.Duration {
	ceiling := p.Ceiling(failures)
	r = min(max(r, 0), 0.999999)
	half := ceiling / 2
	return half + time.Duration(float64(ceiling-half)*r)
}

// Waiter paces one retry loop. The zero Waiter is not usable: set Policy.
// Rand, when set, draws the jitter (math/rand/v2's Float64 in production,
// a fixed value in tests); when nil, every wait is the full Ceiling, for
// loops that retry against this process alone and need no spreading.
// A Waiter is not safe for concurrent use.
type Waiter struct {
	Policy   Policy
	Rand     func() float64
	failures int
}

// Next counts one more failure and returns the delay before the next
// attempt.
func (w *Waiter) Next() time.Duration {
	w.failures++
	if w.Rand == nil {
		return w.Policy.Ceiling(w.failures)
	}
	return w.Policy.Delay(w.failures, w.Rand())
}

// Reset forgets the failures: the next delay is the first one again.
func (w *Waiter) Reset() { w.failures = 0 }

// Failures is the number of failures counted since the last Reset.
func (w *Waiter) Failures() int { return w.failures }

// Wait counts one more failure and sleeps for the delay it gives. It
// returns false when ctx ended first.
func (w *Waiter) Wait(ctx context.Context) bool {
	t := time.NewTimer(w.Next())
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
