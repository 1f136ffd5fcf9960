package server

import (
	"context"
	"net"

	"google.golang.org/grpc"

	pbagent "trellis.dev/trellis/api/agent/v1"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/orchestrator/assignments"
	"trellis.dev/trellis/internal/orchestrator/controllers"
	"trellis.dev/trellis/internal/orchestrator/heartbeat"
)

// addOrchestrator wires the orchestrator's server side, when the registry
// serves its types: the AgentService on the public gRPC server (its
// ForwardHeartbeats on the server-to-server one), the heartbeat tracker
// (active while this server leads) and the instance and task controllers.
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
	// connection to the leader's server-to-server port; in memory this
	// server always leads.
	var leaderConn func() (*grpc.ClientConn, error)
	var leaderChanged func() <-chan struct{}
	self := s.GRPCAddr()
	if s.raft != nil {
		leaderConn = s.raft.Backend().LeaderConn
		leaderChanged = s.raft.Backend().Changed
		self = advertisedPublic(self, s.raft.Backend().ServerAddr())
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
	if s.serverGRPC != nil {
		pbagent.RegisterAgentServiceServer(s.serverGRPC, forwardedHeartbeats{heartbeats: svc})
	}
	ctls, err := controllers.Controllers(controllers.Config{
		API:     s.api,
		Tracker: tracker,
		Cache:   s.ControllerCache(),
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

// agentService is the public AgentService: heartbeats and the per-instance
// task streams, each served by its own part. ForwardHeartbeats is not
// among them: it takes batches on other servers' word, so it is served
// only on the server-to-server port (forwardedHeartbeats).
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

func (a agentService) WatchTasks(req *pbagent.WatchTasksRequest, stream pbagent.AgentService_WatchTasksServer) error {
	return a.assignments.WatchTasks(req, stream)
}

// forwardedHeartbeats is the AgentService of the server-to-server port:
// only the batches followers forward to the leader.
type forwardedHeartbeats struct {
	pbagent.UnimplementedAgentServiceServer
	heartbeats *heartbeat.Service
}

func (f forwardedHeartbeats) ForwardHeartbeats(ctx context.Context, req *pbagent.ForwardHeartbeatsRequest) (*pbagent.ForwardHeartbeatsResponse, error) {
	return f.heartbeats.ForwardHeartbeats(ctx, req)
}

// advertisedPublic is the public gRPC address agents are told is the
// leader's: the listen address, or, when it listens on every interface,
// its port on the host other servers reach this one at.
func advertisedPublic(listen, serverAddr string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return listen
	}
	shost, _, err := net.SplitHostPort(serverAddr)
	if err != nil {
		return listen
	}
	return net.JoinHostPort(shost, port)
}
