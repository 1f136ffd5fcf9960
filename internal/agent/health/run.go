package health

import (
	"context"
	"time"
)

// Run probes with p on c's schedule, counting from started (when the
// container started), and hands each result to report, until ctx ends.
// report is called from Run's goroutine, one result at a time.
func Run(ctx context.Context, c Check, p Prober, started time.Time, report func(Result)) {
	c = c.WithDefaults()
	passed := false
	next := NextProbe(c, started, false, started)
	timer := time.NewTimer(time.Until(next))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		at := time.Now()
		r := probeOnce(ctx, c, p)
		if ctx.Err() != nil {
			// The container is going away: a probe cut short says nothing.
			return
		}
		passed = passed || r.Pass
		report(r)
		timer.Reset(time.Until(NextProbe(c, started, passed, at)))
	}
}

// probeOnce runs one probe bounded by the check's timeout.
func probeOnce(ctx context.Context, c Check, p Prober) Result {
	pctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	r := p.Probe(pctx)
	if pctx.Err() != nil && ctx.Err() == nil {
		// A prober that answered only after its deadline has failed, whatever
		// it says.
		r = Result{Output: "timed out after " + c.Timeout.String()}
	}
	return r
}
