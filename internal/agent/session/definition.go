package session

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/orchestrator"
)

// readDefinition reads namespace ns's task definition family:revision
// ref (a DefinitionReader). NotFound and refusals are final; other errors
// are retried until ctx ends.
func (c *conn) readDefinition(ctx context.Context, ns, ref string) (*pborch.TaskDefinition, error) {
	family, rev, err := orchestrator.ParseTaskDefinitionRef(ref)
	if err != nil {
		return nil, err
	}
	id := orchestrator.TaskDefinitionID(ns, family, rev)
	for failures := 1; ; failures++ {
		rctx, cancel := context.WithTimeout(ctx, c.s.cfg.RPCTimeout)
		// From the leader: a server behind it may not have the
		// definition yet, and NotFound fails the task.
		resp, err := c.res.Read(rctx, &pbresource.ReadRequest{Id: id, Consistent: true})
		cancel()
		if err == nil {
			def := &pborch.TaskDefinition{}
			if err := resp.GetResource().GetData().UnmarshalTo(def); err != nil {
				return nil, fmt.Errorf("task definition %s: %w", ref, err)
			}
			return def, nil
		}
		switch status.Code(err) {
		case codes.NotFound:
			return nil, fmt.Errorf("task definition %s not found in namespace %s", ref, ns)
		case codes.PermissionDenied, codes.InvalidArgument:
			return nil, fmt.Errorf("task definition %s: %s", ref, status.Convert(err).Message())
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.s.clock.After(retryDelay(c.s.cfg.BackoffMin, c.s.cfg.BackoffMax, failures, randFloat())):
		}
	}
}
