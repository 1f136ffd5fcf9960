package controllers

import (
	"context"
	"errors"
	"fmt"
	"sync"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/resource"
)

// writeAll writes in atomic batches of at most writeChunk members. All
// but the last batch go at once, so that Raft carries them together
// instead of one commit after another (a fresh deployment to 5,000
// instances is five batches); the last, which carries the run's status
// reports (the deployments' progress, the environment's status: reports,
// as the batch's status entries), goes only once the others are in:
// progress is never recorded for placements that failed, and a run that
// places and reports costs one commit, as when the progress was data. With
// nothing but reports, they go alone (writeStatuses). A failed batch fails
// the run, which the next run repairs from what is stored, as it would any
// partial plan.
func (r *reconciler) writeAll(ctx context.Context, writes []*pbresource.Resource, reports []*pbresource.WriteStatusRequest) ([]*pbresource.Resource, error) {
	if len(writes) == 0 {
		return r.writeStatuses(ctx, reports)
	}
	defer controller.Waiting(ctx)()
	var chunks [][]*pbresource.Resource
	for start := 0; start < len(writes); start += writeChunk {
		chunks = append(chunks, writes[start:min(start+writeChunk, len(writes))])
	}
	last := chunks[len(chunks)-1]
	errs := make([]error, len(chunks)-1)
	var wg sync.WaitGroup
	for i, batch := range chunks[:len(chunks)-1] {
		wg.Go(func() { _, errs[i] = r.writeBatch(ctx, batch, nil) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return r.writeBatch(ctx, last, reports)
}

// writeBatch writes one batch with its status reports, and returns the
// resources as the reports left them.
func (r *reconciler) writeBatch(ctx context.Context, batch []*pbresource.Resource, reports []*pbresource.WriteStatusRequest) ([]*pbresource.Resource, error) {
	out, err := r.api.WriteBatch(ctx, &pbresource.WriteBatchRequest{Resources: batch, Statuses: reports})
	if err != nil {
		return nil, fmt.Errorf("writing %d resources and %d statuses: %w", len(batch), len(reports), err)
	}
	// The next run sees what this one placed and stopped before the watch
	// brings it back (only the cached types are kept; the runtime files
	// and derives them as it does the watch's events, which the cache
	// never lets go back): a run that follows at once plans from them,
	// and the next run of an environment publishing the same fixed host
	// port sees them (ports.go).
	for _, res := range out.GetResources() {
		r.cache.Apply(controller.Event{Resource: res})
	}
	return out.GetStatuses(), nil
}

// writeStatuses writes status reports alone, in one WriteStatuses, each
// member following the one before it (WriteStatusesRequest.follows): none
// is stored ahead of, or without, those before it, so an environment's
// status reported last is never stored without the deployments' progress
// it follows from. It returns the resources as the reports left them, or
// the first member's error, which fails the run: the next run reads what
// is stored and decides again. Its commit is a wait, not work, for the
// pacing, like the plan's (writeAll): counted as work, it made every run
// that reported a task's death pause twice a commit longer before the
// next run, which places the replacement.
func (r *reconciler) writeStatuses(ctx context.Context, reports []*pbresource.WriteStatusRequest) ([]*pbresource.Resource, error) {
	if len(reports) == 0 {
		return nil, nil
	}
	follows := make(map[uint32]uint32, len(reports)-1)
	for i := 1; i < len(reports); i++ {
		follows[uint32(i)] = uint32(i - 1)
	}
	done := controller.Waiting(ctx)
	resp, err := r.api.WriteStatuses(ctx, &pbresource.WriteStatusesRequest{Statuses: reports, Follows: follows})
	done()
	if err != nil {
		return nil, fmt.Errorf("writing %d statuses: %w", len(reports), err)
	}
	out := make([]*pbresource.Resource, len(reports))
	for i, res := range resp.GetResults() {
		if out[i], err = resource.StatusResult(res); err != nil {
			return nil, fmt.Errorf("the status of %s: %w", ids.String(reports[i].GetId()), err)
		}
	}
	return out, nil
}
