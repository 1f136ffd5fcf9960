package controllers

import (
	"context"
	"sync"
	"time"
)

// runClock adds up how long one run of the reconciler waited for its
// writes to commit, for the pacing (Reconcile): that wait costs the
// leader no CPU.
type runClock struct {
	mu     sync.Mutex
	waited time.Duration
}

// wait starts timing a wait for a commit; call what it returns when the
// commit is in. On a nil clock (outside a run) it times nothing.
func (c *runClock) wait(now func() time.Time) (done func()) {
	if c == nil {
		return func() {}
	}
	start := now()
	return func() {
		d := now().Sub(start)
		c.mu.Lock()
		c.waited += d
		c.mu.Unlock()
	}
}

func (c *runClock) committing() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waited
}

type runClockKey struct{}

func withRunClock(ctx context.Context, c *runClock) context.Context {
	return context.WithValue(ctx, runClockKey{}, c)
}

// runClockOf is the run's clock, or nil outside a run.
func runClockOf(ctx context.Context) *runClock {
	c, _ := ctx.Value(runClockKey{}).(*runClock)
	return c
}
