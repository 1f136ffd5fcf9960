package controllers

import (
	"context"
	"time"

	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/resource"
)

// Reconcile converges one environment. Under a stream of changes (a
// fleet reporting thousands of tasks) it works at most a third of the
// time for one environment: after a run that worked for w, the next waits
// 2w. A run's work is its time less its waits for its writes to commit,
// which cost the leader no CPU: counting them made the pause longer than
// the bound needs, and each batch of a rollout waited it out. Each run
// handles every change since the last, so this bounds the leader's CPU
// without slowing what a run achieves; small environments (runs of a
// millisecond) are not slowed at all.
func (r *reconciler) Reconcile(ctx context.Context, req controller.Request) error {
	key := envKey(req.ID)
	start := r.now()
	r.mu.Lock()
	notBefore := r.notBefore[key]
	r.mu.Unlock()
	if start.Before(notBefore) {
		return controller.RequeueAfter(notBefore.Sub(start))
	}
	run := &runClock{}
	// The scheduler writes the environments it manages, which only the
	// scheduler's own code may (resource.Registration.WrittenThrough).
	err := r.reconcile(withRunClock(resource.FromOperations(ctx), run), req)
	end := r.now()
	work := max(end.Sub(start)-run.committing(), 0)
	r.mu.Lock()
	r.notBefore[key] = end.Add(min(2*work, maxPause))
	r.mu.Unlock()
	return err
}

// maxPause bounds the pause between two runs for one environment.
const maxPause = 250 * time.Millisecond
