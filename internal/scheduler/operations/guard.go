package operations

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbresource "trellis.dev/trellis/api/resource/v1"
	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/scheduler"
)

// errGuardMoved: another create or update of the namespace wrote between
// an operation's checks and its write; the operation starts over.
var errGuardMoved = errors.New("another environment operation of the namespace went first")

// maxGuardTries bounds how often an operation starts over for that.
const maxGuardTries = 5

// guarded runs op until it ends other than by errGuardMoved.
func guarded(op func() (*EnvironmentResult, error)) (*EnvironmentResult, error) {
	for try := 1; ; try++ {
		r, err := op()
		if !errors.Is(err, errGuardMoved) {
			return r, err
		}
		if try == maxGuardTries {
			return nil, status.Errorf(codes.Aborted, "other environment operations of the namespace kept going first (%d tries); retry", try)
		}
	}
}

// guardWrite reads namespace ns's EnvironmentGuard and returns the write
// that bumps it: a compare-and-swap on the version read, or create-only
// when there is none yet. Read before the checks, written with the change,
// it fails the write if any other checked change landed in between.
func (o *Operations) guardWrite(ctx context.Context, ns string) (*pbresource.Resource, error) {
	resp, err := o.API.Read(ctx, &pbresource.ReadRequest{Id: scheduler.GuardID(ns), Consistent: true})
	switch {
	case status.Code(err) == codes.NotFound:
		res, err := scheduler.NewResource(scheduler.GuardID(ns), nil, &pbscheduler.EnvironmentGuard{Changes: 1})
		if err != nil {
			return nil, err
		}
		res.Version = resource.CreateOnly
		return res, nil
	case err != nil:
		return nil, err
	}
	g, err := resource.DecodeData[*pbscheduler.EnvironmentGuard](resp.GetResource())
	if err != nil {
		return nil, err
	}
	g.Changes++
	return scheduler.WithData(resp.GetResource(), g)
}
