package session

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbagent "trellis.dev/trellis/api/agent/v1"
)

// heartbeatLoop heartbeats every third of the TTL, with jitter, on the
// session's heartbeat stream.
//
// A slow answer is not a lost server. The heartbeat stays on the stream
// (its answer counts when it comes, see beatOnStream) and the next one
// goes out on schedule. The agent gives the server up only when it
// refuses, when the stream or the connection fails, or when nothing on
// the stream has said the instance is alive for a whole TTL. Giving up a
// server that is only busy ends the task stream too, and the next server
// lists the instance's tasks again: at 5,000 instances a busy cluster
// turned into agents tearing down their streams and reconnecting, which
// made it busier, until live instances were marked down.
func (c *conn) heartbeatLoop(ctx context.Context) error {
	alive := c.s.clock.Now()
	sent := alive
	for {
		wait := heartbeatInterval(c.s.ttlValue(), randFloat()) - c.s.clock.Now().Sub(sent)
		if wait > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-c.s.clock.After(wait):
			}
		}
		sent = c.s.clock.Now()
		err := c.heartbeat(ctx)
		now := c.s.clock.Now()
		if err == nil {
			alive = now
			continue
		}
		if t := c.lastAnswered(); t.After(alive) {
			alive = t
		}
		if ctx.Err() != nil || !keepServer(status.Code(err), now, alive, c.s.ttlValue()) {
			return fmt.Errorf("heartbeat: %w", err)
		}
		c.s.log.Debug("slow heartbeat answer; keeping the server", "server", c.addr, "alive_at", alive, "err", err)
	}
}

// keepServer decides whether a heartbeat that failed with code at now
// leaves the agent on its server: only a slow answer does, and only while
// an answer on the stream said the instance was alive less than a TTL ago
// (at alive). A refusal, a failed stream or connection, or a whole TTL of
// silence moves the agent to another server.
func keepServer(code codes.Code, now, alive time.Time, ttl time.Duration) bool {
	return code == codes.DeadlineExceeded && now.Before(alive.Add(ttl))
}

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
