package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pbagent "trellis.dev/trellis/api/agent/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/resource"
)

// session is the agent's time on one server: one gRPC connection, and the
// loops that use it (heartbeats, the watch, the reporter). It ends with
// the first of them to fail; the agent then moves to the next server.
type session struct {
	a    *Agent
	addr string
	res  pbresource.ResourceServiceClient
	hb   pbagent.AgentServiceClient
	// beats is the open heartbeat stream (nil between streams). Only the
	// heartbeat loop uses it.
	beats *beatStream
	// starts are the task starts under way on this session; it ends only
	// once they have given up, so that the next session's resync sees
	// the tasks they dropped as idle and starts them again.
	starts sync.WaitGroup
	// ctx ends with the session.
	ctx context.Context
}

var errLeft = errors.New("the instance has left the cluster")

// runSession connects to addr and runs a session on it. worked says it got
// as far as a registered instance and an answered heartbeat: the server
// was usable.
func (a *Agent) runSession(ctx context.Context, addr string) (worked bool, err error) {
	creds := insecure.NewCredentials()
	if a.cfg.TLS != nil {
		creds = credentials.NewTLS(a.cfg.TLS)
	}
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithUnaryInterceptor(tokenUnary(a.cfg.Token)),
		grpc.WithStreamInterceptor(tokenStream(a.cfg.Token)),
	}, a.cfg.DialOptions...)
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return false, err
	}
	defer cc.Close()
	s := &session{a: a, addr: addr, res: pbresource.NewResourceServiceClient(cc), hb: pbagent.NewAgentServiceClient(cc)}
	ctx, cancel := context.WithCancel(ctx)
	s.ctx = ctx
	defer s.starts.Wait()
	defer cancel()
	defer s.closeBeatStream()

	a.mu.Lock()
	registered := a.registered
	a.mu.Unlock()
	if !registered {
		if err := a.register(ctx, s); err != nil {
			return false, err
		}
	}
	if err := s.heartbeat(ctx); err != nil {
		return false, err
	}
	a.server.Store(addr)
	a.setCurrent(s)
	defer func() {
		a.setCurrent(nil)
		a.server.Store("")
	}()
	a.log.Info("connected", "server", addr, "session", a.Session())
	a.resync(ctx, s)
	return true, runAll(ctx, s.heartbeatLoop, s.watchLoop, s.reportLoop, a.untilLeft)
}

func (a *Agent) setCurrent(s *session) {
	a.mu.Lock()
	a.current = s
	a.broadcastLocked()
	a.mu.Unlock()
}

func (a *Agent) untilLeft(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-a.left:
		return errLeft
	}
}

// runAll runs fns until the first returns; it cancels the others, waits
// for them, and returns that first error.
func runAll(ctx context.Context, fns ...func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, len(fns))
	var wg sync.WaitGroup
	for _, fn := range fns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errc <- fn(ctx)
		}()
	}
	err := <-errc
	cancel()
	wg.Wait()
	return err
}

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
func (s *session) heartbeatLoop(ctx context.Context) error {
	last := s.a.clock.Now()
	for {
		wait := heartbeatInterval(s.a.ttlValue(), randFloat())
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.a.clock.After(wait):
		}
		for attempt := 0; ; attempt++ {
			giveUp := last.Add(2 * s.a.ttlValue() / 3)
			err := s.heartbeat(ctx)
			if err == nil {
				last = s.a.clock.Now()
				break
			}
			now := s.a.clock.Now()
			if ctx.Err() != nil || !retryHeartbeat(status.Code(err), now, giveUp) {
				return fmt.Errorf("heartbeat: %w", err)
			}
			s.a.log.Debug("slow heartbeat; trying again", "server", s.addr, "attempt", attempt+1, "err", err)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-s.a.clock.After(min(heartbeatRetryWait, giveUp.Sub(now))):
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
func (s *session) heartbeat(ctx context.Context) error {
	resp, err := s.beat(ctx)
	if status.Code(err) == codes.FailedPrecondition {
		a := s.a
		a.log.Warn("the servers no longer know this session; registering again", "server", s.addr, "reason", status.Convert(err).Message())
		a.mu.Lock()
		a.session = newSessionID(a.clock.Now())
		a.registered = false
		a.mu.Unlock()
		if err := a.register(ctx, s); err != nil {
			return err
		}
		// Every task is reported again with the new session: that
		// re-adopts those the servers marked lost.
		a.resync(ctx, s)
		resp, err = s.beat(ctx)
	}
	if err != nil {
		return err
	}
	if ttl := resp.GetTtl(); ttl != nil && ttl.AsDuration() > 0 {
		s.a.ttl.Store(int64(ttl.AsDuration()))
	}
	return nil
}

// beat sends one heartbeat on the session's heartbeat stream.
func (s *session) beat(ctx context.Context) (*pbagent.HeartbeatResponse, error) {
	req := &pbagent.HeartbeatRequest{Instance: s.a.cfg.Name, Session: s.a.Session()}
	return s.beatOnStream(ctx, req, min(s.a.cfg.RPCTimeout, s.a.ttlValue()/4))
}

func (a *Agent) ttlValue() time.Duration { return time.Duration(a.ttl.Load()) }

// tokenUnary and tokenStream send the ACL token with every call.
func tokenUnary(token string) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if token != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, resource.TokenMetadataKey, token)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

func tokenStream(token string) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if token != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, resource.TokenMetadataKey, token)
		}
		return streamer(ctx, desc, cc, method, opts...)
	}
}
