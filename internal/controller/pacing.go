package controller

import (
	"context"
	"sync"
	"time"
)

// Pacing bounds the share of time one request keeps a worker busy under a
// stream of changes, without delaying a change that comes alone.
//
// Each run of a request costs it the run's time plus Factor×w, where w is
// the run's work; elapsed time pays the cost back. A run starts only while
// the request owes at most Burst, so under a stream of changes a run of
// work w is followed by Factor×w without one, and the request works at most
// 1/(Factor+1) of the time; its runs are never held for more than Max
// after a run ends (what it owes is capped at Burst+Max). This is the
// generic cell-rate algorithm of network traffic shaping, with runs in the
// place of cells. Changes that arrive while a request is held are not
// lost: they are all handled by its next run, which is level-triggered
// like any other.
//
// Burst is what keeps sparse changes fast. Without it, every run held its
// request for Factor×w after it, so a change arriving then waited out the
// hold even when the request had been idle most of the time: an instance
// that joined, or a task that died, 50 ms after the run for the last one
// waited for it. With it, a request whose changes arrive more slowly than
// it works them off runs each at once, and only a stream that would keep
// it busy beyond its share is held, exactly as much as without a burst.
//
// A run's work is its time less the waits it marked with Waiting: a
// reconcile that spends most of its time waiting for its writes to commit
// costs the server little CPU, and holding it for those waits would only
// slow what it achieves.
//
// Pacing is per request and applies whatever the run returned; a failure's
// backoff and a RequeueAfter are kept, but neither runs the request before
// its hold is over.
type Pacing struct {
	// Factor is the hold per unit of work under a stream: 2 means a
	// request works at most a third of the time. Zero turns pacing off.
	Factor int
	// Max bounds how long a request is held after a run. Required with
	// Factor.
	Max time.Duration
	// Burst is what a request may owe and still run at once: a request
	// idle for a while may run back to back until its runs' time and
	// Factor times their work add up to Burst. Zero holds every request
	// for Factor×w after a run of work w.
	Burst time.Duration
}

// Next is the pacing decision after one run of a request: the run lasted
// from start to end and worked for work, and the request owed until owed
// before it (the time at which what it owes is paid back; zero or past
// when it owes nothing). It returns what the request owes after the run
// and how long its next run is held after end.
func (p Pacing) Next(owed, start, end time.Time, work time.Duration) (time.Time, time.Duration) {
	if p.Factor <= 0 {
		return time.Time{}, 0
	}
	if owed.Before(start) {
		owed = start
	}
	owed = owed.Add(max(end.Sub(start), 0) + time.Duration(p.Factor)*max(work, 0))
	if limit := end.Add(p.Burst + p.Max); owed.After(limit) {
		owed = limit
	}
	hold := max(owed.Sub(end)-p.Burst, 0)
	return owed, hold
}

// pacer keeps what each request of one runner owes (see Pacing).
type pacer struct {
	pacing Pacing

	mu   sync.Mutex
	owed map[key]time.Time
	// pruneAt is the size of owed at which the requests that owe nothing
	// are dropped, so that requests never run again do not pile up.
	pruneAt int
}

func newPacer(p Pacing) *pacer {
	return &pacer{pacing: p, owed: map[key]time.Time{}, pruneAt: minPrune}
}

// ran records a run of the request k and returns how long its next run
// is held after end.
func (pc *pacer) ran(k key, start, end time.Time, work time.Duration) time.Duration {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	owed, hold := pc.pacing.Next(pc.owed[k], start, end, work)
	if owed.After(end) {
		pc.owed[k] = owed
	} else {
		delete(pc.owed, k)
	}
	if len(pc.owed) >= pc.pruneAt {
		for k, until := range pc.owed {
			if !until.After(end) {
				delete(pc.owed, k)
			}
		}
		pc.pruneAt = max(minPrune, 2*len(pc.owed))
	}
	return hold
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
