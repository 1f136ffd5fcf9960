package controller

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func TestPacingPause(t *testing.T) {
	p := Pacing{Factor: 2, Max: 250 * time.Millisecond}
	for _, tc := range []struct {
		pacing Pacing
		work   time.Duration
		want   time.Duration
	}{
		{p, 0, 0},
		{p, -time.Millisecond, 0},
		{p, time.Millisecond, 2 * time.Millisecond},
		{p, 100 * time.Millisecond, 200 * time.Millisecond},
		{p, 125 * time.Millisecond, 250 * time.Millisecond},
		{p, time.Second, 250 * time.Millisecond}, // bounded
		{Pacing{}, time.Second, 0},               // off
	} {
		if got := tc.pacing.Pause(tc.work); got != tc.want {
			t.Errorf("%+v.Pause(%s) = %s, want %s", tc.pacing, tc.work, got, tc.want)
		}
	}
}

// TestWaitingAddsUpMarkedWaits: a run's clock sums the waits marked on it,
// from any goroutine (a large write's chunks commit together); outside a
// paced run nothing is marked.
func TestWaitingAddsUpMarkedWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &workClock{}
		ctx := withWorkClock(context.Background(), c)
		done := Waiting(ctx)
		time.Sleep(30 * time.Millisecond)
		done()
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				defer Waiting(ctx)()
				time.Sleep(5 * time.Millisecond)
			})
		}
		wg.Wait()
		if got := c.work(100 * time.Millisecond); got != 60*time.Millisecond {
			t.Fatalf("a run of 100ms that waited 30ms, then 5ms twice, worked %s, want 60ms", got)
		}
		if got := c.work(10 * time.Millisecond); got != 0 {
			t.Fatalf("work below zero: %s", got)
		}
		Waiting(context.Background())() // marks nothing, does not panic
	})
}

// TestRunnerPacesEachRequestByItsWork: after a run, a request's next run
// waits Factor times the run's work (its time less its marked waits),
// however many changes arrive meanwhile; other requests are not held.
func TestRunnerPacesEachRequestByItsWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCalls()
		r, _ := startRunner(t, Controller{
			Workers: 2,
			Pacing:  Pacing{Factor: 2, Max: 250 * time.Millisecond},
			Reconciler: ReconcileFunc(func(ctx context.Context, req Request) error {
				c.record(req.ID.GetName())
				switch req.ID.GetName() {
				case "a":
					time.Sleep(10 * time.Millisecond) // work
					done := Waiting(ctx)
					time.Sleep(30 * time.Millisecond) // a commit
					done()
				case "big":
					time.Sleep(time.Second)
				}
				return nil
			}),
		})
		r.queue.Add(req("a"))
		r.queue.Add(req("big"))
		synctest.Wait() // a runs 0-40ms, then pauses until 60ms; big runs 0-1s
		for range 3 {
			r.queue.Add(req("a"))
			r.queue.Add(req("b"))
			synctest.Wait()
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		want := map[string][]time.Duration{
			"a":   {0, 60 * time.Millisecond}, // 40ms + 2×10ms of work
			"b":   {40 * time.Millisecond},    // at the first free worker, once
			"big": {0},
		}
		for name, w := range want {
			if got := c.times(name); !equalDurations(got, w) {
				t.Errorf("%s ran at %v, want %v", name, got, w)
			}
		}

		// A run of 1s of work pauses its request for Max only.
		r.queue.Add(req("big"))
		synctest.Wait() // runs from 2s to 3s
		r.queue.Add(req("big"))
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if got := c.times("big"); len(got) != 3 || got[2]-got[1] != time.Second+250*time.Millisecond {
			t.Errorf("big ran at %v, want its third run 1.25s after its second (its work, then Max)", got)
		}
	})
}

// TestRunnerPacingKeepsRequeuesAndChangesDuringARun: a change during a
// run, a change during the pause, and a RequeueAfter shorter than the
// pause run once the pause is over; a RequeueAfter longer than the pause
// still runs when it asked.
func TestRunnerPacingKeepsRequeuesAndChangesDuringARun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCalls()
		release := make(chan struct{})
		r, _ := startRunner(t, Controller{
			Workers: 3,
			Pacing:  Pacing{Factor: 2, Max: time.Second},
			Reconciler: ReconcileFunc(func(ctx context.Context, req Request) error {
				if c.record(req.ID.GetName()) > 1 {
					return nil
				}
				switch req.ID.GetName() {
				case "changed":
					<-release
					time.Sleep(100 * time.Millisecond)
				case "requeued":
					time.Sleep(100 * time.Millisecond)
					return RequeueAfter(10 * time.Millisecond)
				case "later":
					time.Sleep(100 * time.Millisecond)
					return RequeueAfter(time.Minute)
				}
				return nil
			}),
		})
		r.queue.Add(req("changed"))
		r.queue.Add(req("requeued"))
		r.queue.Add(req("later"))
		synctest.Wait()
		r.queue.Add(req("changed")) // during its run
		close(release)
		time.Sleep(150 * time.Millisecond)
		r.queue.Add(req("later")) // during its pause
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		// Each first run works 100ms and ends at 100ms: paused until 300ms.
		for name, w := range map[string][]time.Duration{
			"changed":  {0, 300 * time.Millisecond},
			"requeued": {0, 300 * time.Millisecond},
			"later":    {0, 300 * time.Millisecond, 100*time.Millisecond + time.Minute},
		} {
			if got := c.times(name); !equalDurations(got, w) {
				t.Errorf("%s ran at %v, want %v", name, got, w)
			}
		}
	})
}

// TestQueueDropsEndedPauses: pauses of requests never added again do not
// pile up in the queue.
func TestQueueDropsEndedPauses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(Backoff{Base: time.Second, Max: time.Minute})
		for i := range 1000 {
			q.Pace(req(fmt.Sprint(i)), time.Millisecond)
			if i%100 == 99 {
				time.Sleep(time.Millisecond)
			}
		}
		if n := len(q.notBefore); n > 2*100+minPrune {
			t.Errorf("%d pauses kept, want only about the last %d (the others ended)", n, 100)
		}
		q.Pace(req("0"), 0)
		if _, ok := q.notBefore[keyOf(req("0").ID)]; ok {
			t.Error("a zero pause left an entry")
		}
	})
}
