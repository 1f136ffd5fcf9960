package controller

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestPacingNext(t *testing.T) {
	ms := time.Millisecond
	t0 := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	noBurst := Pacing{Factor: 2, Max: 250 * ms}
	burst := Pacing{Factor: 2, Max: 250 * ms, Burst: 100 * ms}
	for _, tc := range []struct {
		name       string
		pacing     Pacing
		owed       time.Time
		start, end time.Duration
		work       time.Duration
		wantOwed   time.Time
		wantHold   time.Duration
	}{
		{"no work", noBurst, time.Time{}, 0, 10 * ms, 0, time.Time{}, 0},
		{"negative work", noBurst, time.Time{}, 0, 10 * ms, -ms, time.Time{}, 0},
		{"all work: twice the work after it", noBurst, time.Time{}, 0, 100 * ms, 100 * ms, at(300 * ms), 200 * ms},
		{"waits are not work", noBurst, time.Time{}, 0, 50 * ms, 20 * ms, at(90 * ms), 40 * ms},
		{"held at most Max", noBurst, time.Time{}, 0, time.Second, time.Second, at(1250 * ms), 250 * ms},
		{"what was owed adds up", noBurst, at(120 * ms), 100 * ms, 110 * ms, 10 * ms, at(150 * ms), 40 * ms},
		{"owed in the past is paid", noBurst, at(50 * ms), 100 * ms, 110 * ms, 10 * ms, at(130 * ms), 20 * ms},
		{"a quiet request runs at once within its burst", burst, time.Time{}, 0, 20 * ms, 20 * ms, at(60 * ms), 0},
		{"beyond the burst it is held", burst, at(90 * ms), 20 * ms, 40 * ms, 20 * ms, at(150 * ms), 10 * ms},
		{"the burst does not raise Max", burst, time.Time{}, 0, time.Second, time.Second, at(1350 * ms), 250 * ms},
		{"off", Pacing{}, at(time.Hour), 0, time.Second, time.Second, time.Time{}, 0},
	} {
		owed, hold := tc.pacing.Next(tc.owed, at(tc.start), at(tc.end), tc.work)
		if hold != tc.wantHold || (!owed.Equal(tc.wantOwed) && !(tc.wantOwed.IsZero() && !owed.After(at(tc.end)))) {
			t.Errorf("%s: Next = owed %s, hold %s; want owed %s, hold %s", tc.name, owed.Sub(t0), hold, tc.wantOwed.Sub(t0), tc.wantHold)
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

// TestRunnerPacesEachRequestByItsWork: without a burst, after a run a
// request's next run waits Factor times the run's work (its time less its
// marked waits), however many changes arrive meanwhile; other requests
// are not held.
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
		synctest.Wait() // a runs 0-40ms, then is held until 60ms; big runs 0-1s
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

// TestRunnerPacingBurst: with a burst, changes that come more slowly than
// the request works them off each run at once (the monitors' case: an
// instance joins, a task dies), while a stream of changes is held to the
// request's share of the time.
func TestRunnerPacingBurst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCalls()
		var r *runner
		var stream atomic.Bool
		r, _ = startRunner(t, Controller{
			Workers: 1,
			Pacing:  Pacing{Factor: 2, Max: 250 * time.Millisecond, Burst: 100 * time.Millisecond},
			Reconciler: ReconcileFunc(func(ctx context.Context, req Request) error {
				c.record(req.ID.GetName())
				time.Sleep(10 * time.Millisecond) // work
				if stream.Load() {
					r.queue.Add(req) // another change during every run
				}
				return nil
			}),
		})
		// Sparse: a change every 40ms costs 30ms of each 40: never held.
		for range 20 {
			r.queue.Add(req("env"))
			time.Sleep(40 * time.Millisecond)
		}
		synctest.Wait()
		for i, at := range c.times("env") {
			if want := time.Duration(i) * 40 * time.Millisecond; at != want {
				t.Fatalf("sparse change %d ran at %s, want at once (%s)", i, at, want)
			}
		}

		// A stream for 3s: back to back at first (the burst), then a third
		// of the time.
		stream.Store(true)
		from := len(c.times("env"))
		r.queue.Add(req("env"))
		time.Sleep(3 * time.Second)
		stream.Store(false)
		time.Sleep(time.Second)
		synctest.Wait()
		runs := len(c.times("env")) - from
		// 3s at a third is 100 runs of 10ms; the burst adds about 5, and
		// the last run's change one more.
		if runs < 95 || runs > 110 {
			t.Errorf("a stream of 3s ran %d times, want about 100 (a third of the time, plus the burst)", runs)
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
