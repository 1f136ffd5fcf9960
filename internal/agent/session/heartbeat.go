package session

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbagent "trellis.dev/trellis/api/agent/v1"
)

// heartbeatLoop heartbeats every third of the TTL, with jitter.
//
// A heartbeat the server is slow to answer (DeadlineExceeded) is tried
// again on the same server until two thirds of the TTL have passed since
// the last one that succeeded; only then does the agent give the server
// up, with a third of the TTL left to reach another. A busy server is
// thus not abandoned for one slow answer (ending the session drops the
// task stream too, and a fleet that reconnects all at once makes a busy
// server busier). A server that refuses or cannot be reached is given up
// at once, as before.
func (c *conn) heartbeatLoop(ctx context.Context) error {
	last := c.s.clock.Now()
	for {
		wait := heartbeatInterval(c.s.ttlValue(), randFloat())
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.s.clock.After(wait):
		}
		for attempt := 0; ; attempt++ {
			giveUp := last.Add(2 * c.s.ttlValue() / 3)
			err := c.heartbeat(ctx)
			if err == nil {
				last = c.s.clock.Now()
				break
			}
			now := c.s.clock.Now()
			if ctx.Err() != nil || !retryHeartbeat(status.Code(err), now, giveUp) {
				return fmt.Errorf("heartbeat: %w", err)
			}
			c.s.log.Debug("slow heartbeat; trying again", "server", c.addr, "attempt", attempt+1, "err", err)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-c.s.clock.After(min(heartbeatRetryWait, giveUp.Sub(now))):
			}
		}
	}
}

// retryHeartbeat decides whether a heartbeat that failed with code at now
// is tried again on the same server: only a slow answer, and only before
// giveUp.
func retryHeartbeat(code codes.Code, now, giveUp time.Time) bool {
	return code == codes.DeadlineExceeded && now.Before(giveUp)
}

// heartbeatRetryWait is the pause before a slow heartbeat is sent again.
const heartbeatRetryWait = 100 * time.Millisecond

// heartbeat sends one heartbeat. FailedPrecondition means the servers do
// not know this session: the agent registers again with a new one, then
// heartbeats for it.
func (c *conn) heartbeat(ctx context.Context) error {
	resp, err := c.beat(ctx)
	if status.Code(err) == codes.FailedPrecondition {
		s := c.s
		s.log.Warn("the servers no longer know this session; registering again", "server", c.addr, "reason", status.Convert(err).Message())
		s.mu.Lock()
		s.id = NewID(s.clock.Now())
		s.registered = false
		s.mu.Unlock()
		if err := c.register(ctx); err != nil {
			return err
		}
		// Every task is reported again with the new session: that
		// re-adopts those the servers marked lost.
		s.tasks.Resync(s.ID())
		resp, err = c.beat(ctx)
	}
	if err != nil {
		return err
	}
	if ttl := resp.GetTtl(); ttl != nil && ttl.AsDuration() > 0 {
		c.s.ttl.Store(int64(ttl.AsDuration()))
	}
	return nil
}

// beat sends one heartbeat on the session's heartbeat stream.
func (c *conn) beat(ctx context.Context) (*pbagent.HeartbeatResponse, error) {
	req := &pbagent.HeartbeatRequest{Instance: c.s.cfg.Name, Session: c.s.ID()}
	return c.beatOnStream(ctx, req, min(c.s.cfg.RPCTimeout, c.s.ttlValue()/4))
}
