package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/resource"
)

// runner runs one controller for one term of leadership: its queue, its
// workers, its resync, and the handlers its informers call.
type runner struct {
	ctl     Controller
	client  resource.API
	logger  *slog.Logger
	metrics *metrics
	queue   *queue
	pacer   *pacer
	refs    *refIndex // nil without Controller.References
	cache   *Cache
}

func newRunner(ctl Controller, client resource.API, logger *slog.Logger, m *metrics) *runner {
	r := &runner{
		ctl:     ctl,
		client:  client,
		logger:  logger.With("controller", ctl.Name),
		metrics: m,
		queue:   newQueue(ctl.Backoff),
		pacer:   newPacer(ctl.Pacing),
	}
	depth := m.depth.WithLabelValues(ctl.Name)
	r.queue.onDepth = func(n int) { depth.Set(float64(n)) }
	if ctl.References != nil {
		r.refs = newRefIndex(ctl.References)
	}
	return r
}

// subscribe hooks the runner onto the informer of one of its watches.
func (r *runner) subscribe(w Watch, in *informer) {
	managed := r.ctl.ManagedType != nil && ids.SameType(w.Type, r.ctl.ManagedType)
	in.handlers = append(in.handlers, func(ev Event) {
		if managed && r.refs != nil {
			r.refs.observe(ev)
		}
		r.enqueue(r.mapEvent(w, ev))
	})
}

// mapEvent runs a watch's mapper on an event. A mapper that panics (a
// programming error, such as a cache lookup of an undeclared index) is
// logged with its stack and maps to nothing: it runs on the informer's
// goroutine, where a panic would take the whole server down, not one
// request. The next resync maps the resource again.
func (r *runner) mapEvent(w Watch, ev Event) (reqs []Request) {
	defer func() {
		if v := recover(); v != nil {
			r.logger.Error("controller mapper panicked, event dropped", "type", ids.TypeString(w.Type), "resource", ids.String(ev.Resource.GetId()), "panic", v, "stack", string(debug.Stack()))
			reqs = nil
		}
	}()
	return w.Map(ev, r)
}

// enqueue adds the requests a mapper returned, dropping those the
// controller cannot reconcile.
func (r *runner) enqueue(reqs []Request) {
	for _, req := range reqs {
		if r.accepts(req) {
			r.queue.Add(req)
		}
	}
}

// accepts says whether a mapper's request is one this runner reconciles.
func (r *runner) accepts(req Request) bool {
	if req.ID == nil {
		return false
	}
	if r.ctl.ManagedType != nil && !ids.SameType(req.ID.GetType(), r.ctl.ManagedType) {
		r.logger.Debug("mapper returned a request of another type, dropped", "request", req.String())
		return false
	}
	return true
}

// run works the queue until ctx ends, then waits for the reconciles in
// flight.
func (r *runner) run(ctx context.Context) {
	var wg sync.WaitGroup
	for range r.ctl.Workers {
		wg.Go(func() {
			for {
				req, ok := r.queue.Get()
				if !ok {
					return
				}
				r.process(ctx, req)
			}
		})
	}
	if r.ctl.ResyncPeriod > 0 {
		wg.Go(func() {
			t := time.NewTicker(r.ctl.ResyncPeriod)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					r.resync(ctx, resyncSpread(r.ctl.ResyncPeriod))
				}
			}
		})
	}
	<-ctx.Done()
	r.queue.ShutDown()
	wg.Wait()
	r.metrics.depth.WithLabelValues(r.ctl.Name).Set(0)
}

// resyncSpread is the time over which a periodic resync's requests are
// queued: a tenth of the period. All at once, the task controller's
// minute resync at 5,000 instances ran 5,000 reconciles back to back on
// the leader and stalled the deployment that was running then.
func resyncSpread(period time.Duration) time.Duration { return period / 10 }

// resync lists every watched type from the store and maps each resource as
// if it had just been written, queueing the requests evenly over spread
// (at once when it is 0: a new leader's resync). Like the informer's watch
// it may list a sealed type: the list only feeds the controller's mapper.
func (r *runner) resync(ctx context.Context, spread time.Duration) {
	ctx = resource.FromOperations(ctx)
	var reqs []Request
	for _, w := range r.ctl.watches() {
		resp, err := r.client.List(ctx, &pbresource.ListRequest{
			Type:    w.Type,
			Tenancy: &pbresource.Tenancy{Namespace: ids.WildcardNamespace},
		})
		if err != nil {
			if ctx.Err() == nil {
				r.logger.Warn("controller resync failed to list, next resync will repair", "type", ids.TypeString(w.Type), "error", err)
			}
			continue
		}
		for _, res := range resp.GetResources() {
			for _, req := range r.mapEvent(w, Event{Resource: res}) {
				if r.accepts(req) {
					reqs = append(reqs, req)
				}
			}
		}
	}
	for i, req := range reqs {
		r.queue.AddAfter(req, spread*time.Duration(i)/time.Duration(len(reqs)))
	}
}

// process runs one reconcile and acts on its result.
func (r *runner) process(ctx context.Context, req Request) {
	defer r.queue.Done(req)
	start := time.Now()
	var clock *workClock
	// The controller writes the status keys it owns (resource.StatusOwner)
	// under its name, which only code in this process can claim.
	runCtx := resource.AsController(ctx, r.ctl.Name)
	if r.ctl.Pacing.Factor > 0 {
		clock = &workClock{}
		runCtx = withWorkClock(runCtx, clock)
	}
	err := r.call(runCtx, req)
	took := time.Since(start)
	r.metrics.duration.WithLabelValues(r.ctl.Name).Observe(took.Seconds())
	if clock != nil {
		r.queue.Pace(req, r.pacer.ran(keyOf(req.ID), start, start.Add(took), clock.work(took)))
	}

	var (
		requeue *RequeueAfterError
		term    *TerminalError
		pe      *panicError
		result  string
	)
	switch {
	case err == nil:
		result = resultSuccess
		r.queue.Forget(req)
	case errors.As(err, &requeue):
		result = resultRequeue
		r.queue.Forget(req)
		r.queue.AddAfter(req, requeue.After)
	case errors.As(err, &term):
		result = resultTerminal
		r.queue.Forget(req)
		r.logger.Error("reconcile failed, not retrying until the next change or resync", "request", req.String(), "error", term.Err)
	case ctx.Err() != nil:
		// The term ended under the reconcile: the next leader's first list
		// runs it again.
		result = resultError
	default:
		result = resultError
		if errors.As(err, &pe) {
			result = resultPanic
			r.logger.Error("reconcile panicked", "request", req.String(), "panic", fmt.Sprint(pe.value), "stack", string(pe.stack))
		}
		d := r.queue.Retry(req)
		r.metrics.retries.WithLabelValues(r.ctl.Name).Inc()
		if pe == nil {
			r.logger.Warn("reconcile failed, retrying", "request", req.String(), "after", d, "failures", r.queue.Failures(req), "error", err)
		}
	}
	r.metrics.reconciles.WithLabelValues(r.ctl.Name, result).Inc()
}

// panicError is a recovered panic of a Reconciler.
type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("reconcile panicked: %v", e.value) }

// call runs the reconciler, turning a panic into an error.
func (r *runner) call(ctx context.Context, req Request) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &panicError{value: v, stack: debug.Stack()}
		}
	}()
	return r.ctl.Reconciler.Reconcile(ctx, req)
}

// Referencing implements Lookup.
func (r *runner) Referencing(id *pbresource.ID) []*pbresource.ID {
	if r.refs == nil {
		return nil
	}
	return r.refs.referencing(id)
}
