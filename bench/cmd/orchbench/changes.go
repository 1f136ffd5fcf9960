package main

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// changes is what the watches that are waited on share: a lock over their
// state, the error that ended their stream, and a channel closed at every
// change, so that a waiter wakes at each event rather than polling.
type changes struct {
	mu      sync.Mutex
	changed chan struct{}
	err     error
}

func newChanges() changes { return changes{changed: make(chan struct{})} }

// broadcastLocked wakes every waiter; call it with mu held, after a
// change.
func (c *changes) broadcastLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// end records that the stream ended with err, and wakes every waiter.
func (c *changes) end(err error) {
	c.mu.Lock()
	c.err = err
	c.broadcastLocked()
	c.mu.Unlock()
}

// waitUntil waits until cond, called with mu held, holds. It returns the
// stream's error if the stream ended first, ctx's if ctx did, or late's
// once limit has passed.
func (c *changes) waitUntil(ctx context.Context, limit time.Duration, cond func() bool, late func() error) error {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		ok, err, ch := cond(), c.err, c.changed
		c.mu.Unlock()
		if ok {
			return nil
		}
		if err != nil {
			return err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return late()
		}
	}
}

// notWithin is the plain late error of waitUntil.
func notWithin(limit time.Duration) func() error {
	return func() error { return fmt.Errorf("not within %s", limit) }
}
