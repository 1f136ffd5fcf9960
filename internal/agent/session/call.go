package session

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Call calls fn with the connection to the server the agent is on, as the
// agent: the instance and its session are named in the call's metadata,
// so that the servers take fn's writes of the status keys an agent owns.
// It is how the agent's components reach the servers, over the session's
// one link. It waits for a connection while there is none, and calls fn
// again, after a backoff and on whatever connection is live then, when fn
// fails with codes.Unavailable (the server went away, or has no leader);
// any other error of fn is returned as it is, and ctx's when it ends
// first.
func (s *Session) Call(ctx context.Context, fn func(ctx context.Context, cc grpc.ClientConnInterface) error) error {
	for failures := 1; ; failures++ {
		c, err := s.waitConn(ctx)
		if err != nil {
			return err
		}
		err = fn(s.asAgent(ctx), c.cc)
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			return err
		}
		s.log.Warn("a call to the servers failed; calling again", "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.clock.After(retryDelay(s.cfg.BackoffMin, s.cfg.BackoffMax, failures, randFloat())):
		}
	}
}
