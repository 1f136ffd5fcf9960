package controllers

import (
	"context"
	"errors"
	"fmt"
	"sync"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/controller"
)

// writeAll writes in atomic batches of at most writeChunk members. All
// but the last batch go at once, so that Raft carries them together
// instead of one commit after another (a fresh deployment to 5,000
// instances is five batches); the last, which holds the run's progress
// writes, goes only once the others are in: progress is never recorded
// for placements that failed. A failed batch fails the run, which the
// next run repairs from what is stored, as it would any partial plan.
func (r *reconciler) writeAll(ctx context.Context, writes []*pbresource.Resource) error {
	if len(writes) == 0 {
		return nil
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
		wg.Go(func() { errs[i] = r.writeBatch(ctx, batch) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return r.writeBatch(ctx, last)
}

func (r *reconciler) writeBatch(ctx context.Context, batch []*pbresource.Resource) error {
	out, err := r.api.WriteBatch(ctx, &pbresource.WriteBatchRequest{Resources: batch})
	if err != nil {
		return fmt.Errorf("writing %d resources: %w", len(batch), err)
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
	return nil
}
