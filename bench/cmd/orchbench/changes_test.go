package main

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// TestChangesWaitUntil: a waiter wakes at the change that makes its
// condition hold, gets the stream's error once it ended, and the late
// error at its limit.
func TestChangesWaitUntil(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newChanges()
		n := 0
		done := make(chan error, 1)
		go func() {
			done <- c.waitUntil(t.Context(), time.Minute, func() bool { return n >= 2 }, notWithin(time.Minute))
		}()
		for range 2 {
			synctest.Wait()
			c.mu.Lock()
			n++
			c.broadcastLocked()
			c.mu.Unlock()
		}
		if err := <-done; err != nil {
			t.Errorf("the condition held: %v", err)
		}

		start := time.Now()
		err := c.waitUntil(t.Context(), time.Minute, func() bool { return n >= 3 }, notWithin(time.Minute))
		if err == nil || err.Error() != "not within 1m0s" || time.Since(start) != time.Minute {
			t.Errorf("never held: %v after %s; want the late error after a minute", err, time.Since(start))
		}

		ended := errors.New("stream ended")
		go func() {
			synctest.Wait()
			c.end(ended)
		}()
		if err := c.waitUntil(t.Context(), time.Minute, func() bool { return false }, notWithin(time.Minute)); !errors.Is(err, ended) {
			t.Errorf("after the stream ended: %v, want %v", err, ended)
		}

		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		c.err = nil
		if err := c.waitUntil(ctx, time.Minute, func() bool { return false }, notWithin(time.Minute)); !errors.Is(err, context.Canceled) {
			t.Errorf("with ctx ended: %v", err)
		}
	})
}
