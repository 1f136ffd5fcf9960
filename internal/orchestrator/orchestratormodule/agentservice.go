package orchestratormodule

import (
	"context"

	pbagent "trellis.dev/trellis/api/agent/v1"
	"trellis.dev/trellis/internal/orchestrator/assignments"
	"trellis.dev/trellis/internal/orchestrator/heartbeat"
)

// agentService is the public AgentService: registrations, heartbeats and
// the per-instance task streams, each served by its own part. Forwarded heartbeats are
// another service, HeartbeatForwarding: it takes batches on other
// servers' word, so it is served only on the server-to-server port
// (forwardedHeartbeats).
type agentService struct {
	pbagent.UnimplementedAgentServiceServer
	registrar   registrar
	heartbeats  *heartbeat.Service
	assignments *assignments.Hub
}

func (a agentService) Register(ctx context.Context, req *pbagent.RegisterRequest) (*pbagent.RegisterResponse, error) {
	return a.registrar.Register(ctx, req)
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

// forwardedHeartbeats is the HeartbeatForwarding of the server-to-server
// port: the batches followers forward to the leader.
type forwardedHeartbeats struct {
	pbagent.UnimplementedHeartbeatForwardingServer
	heartbeats *heartbeat.Service
}

func (f forwardedHeartbeats) ForwardHeartbeats(ctx context.Context, req *pbagent.ForwardHeartbeatsRequest) (*pbagent.ForwardHeartbeatsResponse, error) {
	return f.heartbeats.ForwardHeartbeats(ctx, req)
}
