package health

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// scriptedProber passes from a given time on; it records when it was
// called.
type scriptedProber struct {
	mu        sync.Mutex
	passFrom  time.Time
	calls     []time.Time
	hangUntil time.Time // probes before this block until ctx ends
}

func (p *scriptedProber) Probe(ctx context.Context) Result {
	now := time.Now()
	p.mu.Lock()
	p.calls = append(p.calls, now)
	hang := now.Before(p.hangUntil)
	pass := !now.Before(p.passFrom)
	p.mu.Unlock()
	if hang {
		<-ctx.Done()
		return Result{Pass: true} // too late: Run must count it as failed
	}
	return Result{Pass: pass}
}

func TestRunSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		c := Check{TCP: "h:1", Interval: 10 * time.Second, StartPeriod: 5 * time.Second, Retries: 2}
		p := &scriptedProber{passFrom: start.Add(3 * time.Second)}
		ctx, cancel := context.WithCancel(t.Context())
		var mu sync.Mutex
		tr := NewTracker(start)
		done := make(chan struct{})
		go func() {
			defer close(done)
			Run(ctx, c, p, start, func(r Result) {
				mu.Lock()
				tr = tr.Record(c, r, time.Now())
				mu.Unlock()
			})
		}()
		time.Sleep(25*time.Second + time.Millisecond)
		synctest.Wait()
		cancel()
		<-done

		// Quick probes at 1, 2, 3 s (the third passes), then every 10 s.
		want := []time.Duration{1, 2, 3, 13, 23}
		if len(p.calls) != len(want) {
			t.Fatalf("probed at %v, want at %v seconds", offsets(start, p.calls), want)
		}
		for i, at := range p.calls {
			if at.Sub(start) != want[i]*time.Second {
				t.Fatalf("probed at %v, want at %v seconds", offsets(start, p.calls), want)
			}
		}
		if tr.Status != Healthy {
			t.Fatalf("status %s, want HEALTHY", tr.Status)
		}
	})
}

func TestRunTimeoutFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		c := Check{TCP: "h:1", Interval: 10 * time.Second, Timeout: 2 * time.Second, Retries: 1}
		p := &scriptedProber{hangUntil: start.Add(time.Hour)}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		results := make(chan Result, 1)
		go Run(ctx, c, p, start, func(r Result) { results <- r })
		r := <-results
		if r.Pass || time.Since(start) != 12*time.Second {
			t.Fatalf("got %+v after %s, want a failure at 12s (10s interval + 2s timeout)", r, time.Since(start))
		}
	})
}

func offsets(start time.Time, ts []time.Time) []time.Duration {
	var out []time.Duration
	for _, t := range ts {
		out = append(out, t.Sub(start))
	}
	return out
}
