package heartbeat

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pbagent "trellis.dev/trellis/api/agent/v1"
	"trellis.dev/trellis/internal/resource"
)

// forwardedKey marks a heartbeat forwarded alone, as followers did before
// they forwarded batches (ForwardHeartbeats). The leader answers it itself
// or fails it: a forwarded heartbeat is never forwarded again, so two
// servers that each think the other leads cannot bounce it forever.
const forwardedKey = "x-trellis-heartbeat-forwarded"

// MaxSessionLength bounds the session a heartbeat names.
const MaxSessionLength = 128

// MaxForwardBatch is the most heartbeats one ForwardHeartbeats call may
// carry (about a megabyte of requests at the longest names).
const MaxForwardBatch = 5000

// ServiceConfig is what the AgentService needs.
type ServiceConfig struct {
	// Tracker keeps the heartbeats while this server leads. Required.
	Tracker *Tracker
	// LeaderConn returns a connection to the leader's server-to-server port
	// (where ForwardHeartbeats is served), failing
	// when no leader is known or this server is the leader; nil when this
	// server is always the leader (the in-memory backend).
	LeaderConn func() (*grpc.ClientConn, error)
	// Self is this server's public gRPC address, which answers name as the
	// leader.
	Self string
	// LeaderChanged, when set, returns a channel closed at the next change
	// of leader: a heartbeat held while no leader can be reached is sent
	// again then.
	LeaderChanged func() <-chan struct{}
	// ForwardWindow, ForwardBatch and ForwardTimeout shape the batches a
	// follower forwards: a batch leaves ForwardWindow after its first
	// heartbeat, or as soon as it holds ForwardBatch (at most
	// MaxForwardBatch), and its call gives up after ForwardTimeout, which
	// also bounds how long a heartbeat is held while no leader can be
	// reached. Zero means DefaultForwardWindow, DefaultForwardBatch,
	// DefaultForwardTimeout.
	ForwardWindow  time.Duration
	ForwardBatch   int
	ForwardTimeout time.Duration
}

// Service serves AgentService.Heartbeat and HeartbeatForwarding (the server
// assembles it with the assignments hub, which serves WatchTasks): any
// server takes a heartbeat; the leader keeps it and a follower forwards it
// to the leader in a batch with the others it received meanwhile. Start
// runs the batching; the server runs it for as long as it serves.
type Service struct {
	pbagent.UnimplementedAgentServiceServer
	pbagent.UnimplementedHeartbeatForwardingServer
	cfg ServiceConfig
	// fwd batches forwarded heartbeats; nil when there is no leader to
	// forward to (LeaderConn is nil).
	fwd *forwarder
}

// NewService returns the heartbeat service over a Tracker.
func NewService(cfg ServiceConfig) (*Service, error) {
	if cfg.Tracker == nil {
		return nil, errors.New("agent service: ServiceConfig.Tracker is required")
	}
	s := &Service{cfg: cfg}
	if cfg.LeaderConn != nil {
		s.fwd = newForwarder(cfg.LeaderConn, s.take, cfg, cfg.Tracker.metrics)
	}
	return s, nil
}

// Start runs the forwarding of heartbeats to the leader until ctx ends.
// Heartbeats that need forwarding wait until it runs, and are answered
// with Unavailable once it has stopped. Call it once.
func (s *Service) Start(ctx context.Context) error {
	if s.fwd == nil {
		<-ctx.Done()
		return nil
	}
	return s.fwd.run(ctx)
}

// Heartbeat implements pbagent.AgentServiceServer.
func (s *Service) Heartbeat(ctx context.Context, req *pbagent.HeartbeatRequest) (*pbagent.HeartbeatResponse, error) {
	start := time.Now()
	m := s.cfg.Tracker.metrics
	resp, err := s.take(ctx, req, 0)
	if !errors.Is(err, ErrNotLeader) {
		m.answerSeconds.WithLabelValues(pathKept).Observe(time.Since(start).Seconds())
		return resp, err
	}
	if s.fwd == nil || forwarded(ctx) {
		return nil, errNoLeader
	}
	m.heartbeats.WithLabelValues(resultForwarded).Inc()
	resp, err = s.fwd.forward(ctx, req)
	m.answerSeconds.WithLabelValues(pathForwarded).Observe(time.Since(start).Seconds())
	return resp, err
}

// Path labels of the answer_seconds metric.
const (
	pathKept      = "kept"
	pathForwarded = "forwarded"
)

// HeartbeatStream implements pbagent.AgentServiceServer: Heartbeat for
// each request of the stream, answered in order. The first error ends the
// stream with it. A heartbeat the leader is slow to take is answered late,
// not dropped: the forwarder bounds how long it is held (ForwardTimeout),
// and the agent keeps the stream and counts the late answer. Ending the
// stream on a slow answer, as this did after a quarter of the TTL, threw
// away heartbeats the leader was about to take, exactly when it was busy.
func (s *Service) HeartbeatStream(stream pbagent.AgentService_HeartbeatStreamServer) error {
	ctx := stream.Context()
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		resp, err := s.Heartbeat(ctx, req)
		if err != nil {
			return err
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// ForwardHeartbeats implements pbagent.HeartbeatForwardingServer: the leader's
// side of a follower's batch. Each heartbeat is answered as Heartbeat
// would have answered it on the leader, and never forwarded again.
func (s *Service) ForwardHeartbeats(ctx context.Context, req *pbagent.ForwardHeartbeatsRequest) (*pbagent.ForwardHeartbeatsResponse, error) {
	if n := len(req.GetHeartbeats()); n > MaxForwardBatch {
		return nil, status.Errorf(codes.InvalidArgument, "heartbeats: %d in one batch, over the limit of %d", n, MaxForwardBatch)
	}
	out := &pbagent.ForwardHeartbeatsResponse{Results: make([]*pbagent.HeartbeatResult, len(req.GetHeartbeats()))}
	waited := req.GetWaited()
	for i, hb := range req.GetHeartbeats() {
		var w time.Duration
		if i < len(waited) {
			w = waited[i].AsDuration()
		}
		resp, err := s.take(ctx, hb, w)
		if errors.Is(err, ErrNotLeader) {
			err = errNoLeader
		}
		out.Results[i] = encodeResult(resp, err)
	}
	return out, nil
}

// errNoLeader answers a heartbeat that reached a server that is not the
// leader and may not forward it.
var errNoLeader = status.Error(codes.Unavailable, "no leader is ready to take heartbeats (an election is under way): retry shortly")

// take checks a heartbeat and gives it to the Tracker, as heard waited
// ago (the time it spent on a follower): ErrNotLeader when this server
// does not keep heartbeats now.
func (s *Service) take(ctx context.Context, req *pbagent.HeartbeatRequest, waited time.Duration) (*pbagent.HeartbeatResponse, error) {
	if err := checkRequest(req); err != nil {
		return nil, err
	}
	t := s.cfg.Tracker
	if err := t.HeartbeatHeard(ctx, req.GetInstance(), req.GetSession(), waited); err != nil {
		return nil, err
	}
	return &pbagent.HeartbeatResponse{Ttl: durationpb.New(t.TTL()), Leader: s.cfg.Self}, nil
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
