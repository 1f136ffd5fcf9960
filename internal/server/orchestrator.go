package server

import (
	"context"

	"google.golang.org/grpc"

	pbagent "trellis.dev/trellis/api/agent/v1"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/orchestrator/assignments"
	"trellis.dev/trellis/internal/orchestrator/controllers"
	"trellis.dev/trellis/internal/orchestrator/heartbeat"
)

// addOrchestrator wires the orchestrator's server side, when the registry
// serves its types: the AgentService on the gRPC server, the heartbeat
// tracker (active while this server leads) and the instance and task
// controllers.
func (s *Server) addOrchestrator() error {
	if _, ok := s.registry.Resolve(orchestrator.InstanceType); !ok || s.leadership == nil {
		return nil
	}
	tracker, err := heartbeat.NewTracker(heartbeat.Config{
		TTL:        s.cfg.HeartbeatTTL,
		Instances:  s.api,
		Leadership: s.leadership.Subscribe(),
		Registerer: s.metrics,
		Logger:     s.log.With("component", "heartbeat"),
	})
	if err != nil {
		return err
	}
	// A follower forwards heartbeats over the Raft backend's pooled
	// connection to the leader; in memory this server always leads.
	var leaderConn func() (*grpc.ClientConn, error)
	var leaderChanged func() <-chan struct{}
	self := s.GRPCAddr()
	if s.raft != nil {
		leaderConn = s.raft.Backend().LeaderConn
		leaderChanged = s.raft.Backend().Changed
		self = s.raft.Backend().GRPCAddr()
	}
	svc, err := heartbeat.NewService(heartbeat.ServiceConfig{Tracker: tracker, LeaderConn: leaderConn, LeaderChanged: leaderChanged, Self: self})
	if err != nil {
		return err
	}
	hub := assignments.NewHub(s.api, s.log.With("component", "assignments"))
	if s.raft != nil {
		hub.SetClusterIndex(s.raft.Backend().LeaderIndex)
	}
	pbagent.RegisterAgentServiceServer(s.grpc, agentService{heartbeats: svc, assignments: hub})
	ctls, err := controllers.Controllers(controllers.Config{
		API:     s.api,
		Tracker: tracker,
		Logger:  s.log.With("component", "orchestrator"),
	})
	if err != nil {
		return err
	}
	for _, c := range ctls {
		s.AddController(c)
	}
	s.Add("heartbeats", tracker)
	// The forwarder starts after the gRPC server and stops before it
	// (runnables stop in reverse): a heartbeat arriving once it has
	// stopped is answered Unavailable at once, and one in a batch under
	// way gets its answer, or Unavailable when the call is cut short.
	s.Add("heartbeat-forwarder", svc)
	s.Add("assignments", hub)
	return nil
}

// agentService is the AgentService: heartbeats and the per-instance task
// streams, each served by its own part.
type agentService struct {
	pbagent.UnimplementedAgentServiceServer
	heartbeats  *heartbeat.Service
	assignments *assignments.Hub
}

func (a agentService) Heartbeat(ctx context.Context, req *pbagent.HeartbeatRequest) (*pbagent.HeartbeatResponse, error) {
	return a.heartbeats.Heartbeat(ctx, req)
}

func (a agentService) HeartbeatStream(stream pbagent.AgentService_HeartbeatStreamServer) error {
	return a.heartbeats.HeartbeatStream(stream)
}

func (a agentService) ForwardHeartbeats(ctx context.Context, req *pbagent.ForwardHeartbeatsRequest) (*pbagent.ForwardHeartbeatsResponse, error) {
	return a.heartbeats.ForwardHeartbeats(ctx, req)
}

func (a agentService) WatchTasks(req *pbagent.WatchTasksRequest, stream pbagent.AgentService_WatchTasksServer) error {
	return a.assignments.WatchTasks(req, stream)
}
