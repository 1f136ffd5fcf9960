package heartbeat_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pbagent "trellis.dev/trellis/api/agent/v1"
	"trellis.dev/trellis/internal/orchestrator/heartbeat"
)

// serve runs the AgentService over tracker on a loopback port, with its
// forwarder, and returns a client of it and its address.
func serve(t *testing.T, cfg heartbeat.ServiceConfig, opts ...grpc.ServerOption) (pbagent.AgentServiceClient, string) {
	t.Helper()
	_, client, addr := serveService(t, cfg, opts...)
	return client, addr
}

// serveService is serve that also returns the Service, for calls that
// bypass gRPC.
func serveService(t *testing.T, cfg heartbeat.ServiceConfig, opts ...grpc.ServerOption) (*heartbeat.Service, pbagent.AgentServiceClient, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Self == "" {
		cfg.Self = ln.Addr().String()
	}
	svc, err := heartbeat.NewService(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	pbagent.RegisterAgentServiceServer(srv, svc)
	pbagent.RegisterHeartbeatForwardingServer(srv, svc)
	go func() { _ = srv.Serve(ln) }()
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- svc.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-stopped; err != nil {
			t.Errorf("Service.Start = %v", err)
		}
		srv.Stop()
	})
	return svc, pbagent.NewAgentServiceClient(dial(t, ln.Addr().String())), ln.Addr().String()
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// A follower forwards heartbeats to the leader over gRPC; the leader's
// answers, refusals included, come back as they are.
func TestFollowerForwardsToTheLeader(t *testing.T) {
	ctx := context.Background()
	clients, leaderAddr := leaderAndFollower(t)
	for name, c := range clients {
		resp, err := c.Heartbeat(ctx, &pbagent.HeartbeatRequest{Instance: "i-1", Session: "s1"})
		if err != nil {
			t.Fatalf("Heartbeat to the %s = %v", name, err)
		}
		if resp.GetTtl().AsDuration() != testTTL || resp.GetLeader() != leaderAddr {
			t.Fatalf("Heartbeat to the %s = %v, want ttl %s and leader %s", name, resp, testTTL, leaderAddr)
		}
		_, err = c.Heartbeat(ctx, &pbagent.HeartbeatRequest{Instance: "i-1", Session: "old"})
		if status.Code(err) != codes.FailedPrecondition || heartbeat.ReasonOf(err) != heartbeat.ReasonSessionMismatch {
			t.Fatalf("stale session through the %s = %v, want FailedPrecondition %s", name, err, heartbeat.ReasonSessionMismatch)
		}
	}
}

// leaderAndFollower serves a leader whose tracker knows instance i-1 in
// session s1, and a follower that forwards to it; it returns a client of
// each, by role, and the leader's address.
func leaderAndFollower(t *testing.T) (map[string]pbagent.AgentServiceClient, string) {
	t.Helper()
	leader := newEnv(t)
	leader.setLeader(true)
	leader.register("i-1", "s1", "ready")
	leaderClient, leaderAddr := serve(t, heartbeat.ServiceConfig{Tracker: leader.tracker})
	// The follower's own tracker is inactive: it is not the leader.
	follower := newEnv(t)
	toLeader := dial(t, leaderAddr)
	followerClient, _ := serve(t, heartbeat.ServiceConfig{
		Tracker:    follower.tracker,
		LeaderConn: func() (*grpc.ClientConn, error) { return toLeader, nil },
	})
	return map[string]pbagent.AgentServiceClient{"leader": leaderClient, "follower": followerClient}, leaderAddr
}

// Without a leader to reach, a heartbeat is held for the forward timeout
// and then fails with Unavailable, which the agent retries; it is never
// bounced between servers. A caller whose deadline comes first gets
// DeadlineExceeded.
func TestNoLeaderIsUnavailable(t *testing.T) {
	ctx := context.Background()
	const hold = 200 * time.Millisecond
	// A server that is not the leader, and whose idea of the leader is a
	// server that is not the leader either: the forwarded heartbeat is
	// refused there, not forwarded back.
	other := newEnv(t)
	onOther := &calls{}
	otherClient, otherAddr := serve(t, heartbeat.ServiceConfig{
		Tracker:        other.tracker,
		LeaderConn:     func() (*grpc.ClientConn, error) { return nil, errors.New("no leader is known") },
		ForwardTimeout: hold,
	}, grpc.UnaryInterceptor(onOther.intercept))
	e := newEnv(t)
	toOther := dial(t, otherAddr)
	client, _ := serve(t, heartbeat.ServiceConfig{
		Tracker:        e.tracker,
		LeaderConn:     func() (*grpc.ClientConn, error) { return toOther, nil },
		ForwardTimeout: hold,
	})
	for name, c := range map[string]pbagent.AgentServiceClient{"no leader known": otherClient, "forwarded to a non-leader": client} {
		start := time.Now()
		_, err := c.Heartbeat(ctx, &pbagent.HeartbeatRequest{Instance: "i-1", Session: "s1"})
		if status.Code(err) != codes.Unavailable || heartbeat.ReasonOf(err) != "" {
			t.Errorf("%s: Heartbeat = %v, want Unavailable without a reason", name, err)
		}
		if took := time.Since(start); took < hold {
			t.Errorf("%s: Heartbeat answered after %s, before the hold of %s ended", name, took, hold)
		}
		short, cancel := context.WithTimeout(ctx, hold/4)
		_, err = c.Heartbeat(short, &pbagent.HeartbeatRequest{Instance: "i-1", Session: "s1"})
		cancel()
		if status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("%s: Heartbeat with a deadline shorter than the hold = %v, want DeadlineExceeded", name, err)
		}
	}
	if n := onOther.count(pbagent.AgentService_Heartbeat_FullMethodName); n != 2 {
		t.Errorf("the server without a leader got %d Heartbeat calls, want the test's 2 (nothing bounced back)", n)
	}
}

func TestBadHeartbeats(t *testing.T) {
	e := newEnv(t)
	e.setLeader(true)
	client, _ := serve(t, heartbeat.ServiceConfig{Tracker: e.tracker})
	for _, req := range []*pbagent.HeartbeatRequest{
		{Session: "s1"},
		{Instance: "Not_A_Name", Session: "s1"},
		{Instance: "i-1"},
		{Instance: "i-1", Session: string(make([]byte, heartbeat.MaxSessionLength+1))},
	} {
		if _, err := client.Heartbeat(context.Background(), req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("Heartbeat(%v) = %v, want InvalidArgument", req, err)
		}
	}
}
