package controller

import (
	"context"
	"sync"
	"time"
)

// Pacing bounds the share of time one request keeps a worker busy under a
// stream of changes: after a run that worked for w, the request's next run
// starts no sooner than min(Factor×w, Max) after that run ended. Changes
// that arrive meanwhile are not lost: they are all handled by that next
// run, which is level-triggered like any other. A request whose runs are
// short is hardly delayed at all.
//
// A run's work is its time less the waits it marked with Waiting: a
// reconcile that spends most of its time waiting for its writes to commit
// costs the server little CPU, and pausing it for those waits would only
// slow what it achieves.
//
// Pacing is per request and applies whatever the run returned; a failure's
// backoff and a RequeueAfter are kept, but neither runs the request before
// the pause is over.
type Pacing struct {
	// Factor is the pause per unit of work: 2 means a request works at
	// most a third of the time. Zero turns pacing off.
	Factor int
	// Max bounds the pause. Required with Factor.
	Max time.Duration
}

// Pause is how long the next run waits after a run that worked for work.
func (p Pacing) Pause(work time.Duration) time.Duration {
	if p.Factor <= 0 || work <= 0 {
		return 0
	}
	return min(time.Duration(p.Factor)*work, p.Max)
}

// workClock adds up how long one run waited on what the reconciler marked
// with Waiting, from any goroutine of the run.
type workClock struct {
	mu     sync.Mutex
	waited time.Duration
}

type workClockKey struct{}

func withWorkClock(ctx context.Context, c *workClock) context.Context {
	return context.WithValue(ctx, workClockKey{}, c)
}

// Waiting marks a wait of the reconcile that ctx belongs to as not work,
// for its controller's Pacing: call it when the wait starts (for a write
// to commit, say) and what it returns when the wait is over. Waits may
// overlap, from several goroutines; they are added up. Outside a paced
// reconcile it marks nothing.
func Waiting(ctx context.Context) (done func()) {
	c, _ := ctx.Value(workClockKey{}).(*workClock)
	if c == nil {
		return func() {}
	}
	start := time.Now()
	return func() {
		d := time.Since(start)
		c.mu.Lock()
		c.waited += d
		c.mu.Unlock()
	}
}

// work is how long a run that lasted took worked: its time less its
// marked waits, never below zero.
func (c *workClock) work(took time.Duration) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return max(took-c.waited, 0)
}
