package controllers

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestRunClockAddsUpCommitWaits: a run's clock sums the waits timed on
// it, from any goroutine (a large write's chunks commit together); outside
// a run nothing is timed.
func TestRunClockAddsUpCommitWaits(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 11, 22, 7, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }

	run := &runClock{}
	ctx := withRunClock(context.Background(), run)
	done := runClockOf(ctx).wait(clock)
	advance(30 * time.Millisecond)
	done()
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { runClockOf(ctx).wait(clock)() })
	}
	wg.Wait()
	done = runClockOf(ctx).wait(clock)
	advance(5 * time.Millisecond)
	done()
	if got := run.committing(); got != 35*time.Millisecond {
		t.Fatalf("the run waited %s for commits, want 35ms", got)
	}
	if c := runClockOf(context.Background()); c != nil {
		t.Fatal("a context outside a run has a run clock")
	}
	runClockOf(context.Background()).wait(clock)() // times nothing, does not panic
}
