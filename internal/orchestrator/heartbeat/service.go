package heartbeat

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pbagent "trellis.dev/trellis/api/agent/v1"
	"trellis.dev/trellis/internal/resource"
)

// forwardedKey marks a heartbeat a follower forwarded. The leader answers
// it itself or fails it: a forwarded heartbeat is never forwarded again, so
// two servers that each think the other leads cannot bounce it forever.
const forwardedKey = "x-trellis-heartbeat-forwarded"

// MaxSessionLength bounds the session a heartbeat names.
const MaxSessionLength = 128

// ServiceConfig is what the AgentService needs.
type ServiceConfig struct {
	// Tracker keeps the heartbeats while this server leads. Required.
	Tracker *Tracker
	// LeaderConn returns a connection to the leader's gRPC port, failing
	// when no leader is known or this server is the leader; nil when this
	// server is always the leader (the in-memory backend).
	LeaderConn func() (*grpc.ClientConn, error)
	// Self is this server's gRPC address, which answers name as the leader.
	Self string
}

// Service serves AgentService.Heartbeat (the server assembles it with the
// assignments hub, which serves WatchTasks): any server takes a heartbeat;
// the leader keeps it and a follower forwards it to the leader.
type Service struct {
	pbagent.UnimplementedAgentServiceServer
	cfg ServiceConfig
}

// NewService returns the heartbeat service over a Tracker.
func NewService(cfg ServiceConfig) (*Service, error) {
	if cfg.Tracker == nil {
		return nil, errors.New("agent service: ServiceConfig.Tracker is required")
	}
	return &Service{cfg: cfg}, nil
}

// Heartbeat implements pbagent.AgentServiceServer.
func (s *Service) Heartbeat(ctx context.Context, req *pbagent.HeartbeatRequest) (*pbagent.HeartbeatResponse, error) {
	if err := checkRequest(req); err != nil {
		return nil, err
	}
	t := s.cfg.Tracker
	err := t.Heartbeat(ctx, req.GetInstance(), req.GetSession())
	if err == nil {
		return &pbagent.HeartbeatResponse{Ttl: durationpb.New(t.TTL()), Leader: s.cfg.Self}, nil
	}
	if !errors.Is(err, ErrNotLeader) {
		return nil, err
	}
	if s.cfg.LeaderConn == nil || forwarded(ctx) {
		return nil, status.Error(codes.Unavailable, "no leader is ready to take heartbeats (an election is under way): retry shortly")
	}
	conn, err := s.cfg.LeaderConn()
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "cannot reach the leader to take this heartbeat: %v; retry shortly", err)
	}
	t.metrics.heartbeats.WithLabelValues(resultForwarded).Inc()
	fctx := metadata.AppendToOutgoingContext(ctx, forwardedKey, "1")
	resp, err := pbagent.NewAgentServiceClient(conn).Heartbeat(fctx, req)
	if err != nil {
		// The leader's answers (refusals included) pass through as they are;
		// a failure to reach it is Unavailable already. Heartbeats have no
		// effect beyond the leader's memory, so retrying is always safe.
		if _, ok := status.FromError(err); !ok {
			return nil, status.Errorf(codes.Unavailable, "forwarding the heartbeat to the leader: %v", err)
		}
		return nil, err
	}
	return resp, nil
}

func forwarded(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	return len(md.Get(forwardedKey)) > 0
}

func checkRequest(req *pbagent.HeartbeatRequest) error {
	if err := resource.ValidateName("instance", req.GetInstance()); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	switch n := len(req.GetSession()); {
	case n == 0:
		return status.Error(codes.InvalidArgument, "session: is required: the agent's current session, as stored in its Instance")
	case n > MaxSessionLength:
		return status.Errorf(codes.InvalidArgument, "session: is %d bytes long, over the limit of %d", n, MaxSessionLength)
	}
	return nil
}
