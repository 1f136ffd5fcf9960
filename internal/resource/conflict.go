package resource

import (
	"context"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc/status"
)

// conflictPause waits before retrying an upsert that lost a
// compare-and-swap race: a random time up to 1 ms × 2^attempt, at most
// 64 ms. Writers contending for one resource then spread out instead of
// colliding again at once, and each gets its turn well within the attempts
// allowed.
func conflictPause(ctx context.Context, attempt int) error {
	ceiling := min(time.Millisecond<<min(attempt, 6), 64*time.Millisecond)
	t := time.NewTimer(rand.N(ceiling) + 1)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}
