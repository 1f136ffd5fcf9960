package server

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	pbagent "trellis.dev/trellis/api/agent/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/resource"
)

// An agent writes the status keys it owns (a task's status["agent"]) over
// the public gRPC port. The resource service takes a caller for the agent
// of an instance only when the context says so (resource.AsAgent), which
// no request can carry: this interceptor is where the server proves it,
// for the status writes, from what the connection and the store say:
//
//  1. the connection's client certificate, when it is an agent leaf of
//     the Connect CA of this datacenter
//     (spiffe://<td>/agent/client/dc/<dc>/id/<instance>), verified again
//     here (tlsutil.Configurator.ConnectAgent): the agent of <instance>;
//  2. else the instance and session the call names in its metadata
//     (resource.AgentInstanceMetadataKey, AgentSessionMetadataKey), when
//     the store says that instance's agent registered that session last
//     (the module that registers agents answers: module.Parts.AgentSessions).
//
// A caller that proves neither is no agent: it may still write what its
// ACLs allow, but no key an agent owns. A session is a weaker proof than
// a leaf: whoever may read the Instance can read it (see
// docs/architecture.md, the security plane).

// provesAgents lists the methods whose callers the interceptors identify:
// the status writes, and the agent's link for task logs (a link that is
// not its instance's agent's is refused, tasklogs.Hub.Attach).
var provesAgents = map[string]bool{
	pbresource.ResourceService_WriteStatus_FullMethodName:   true,
	pbresource.ResourceService_WriteStatuses_FullMethodName: true,
	// The writes of the types whose resources only their instance's
	// agent writes among agents (resource.Registration.AgentWritten: a
	// service instance of a task), so that another agent is refused.
	pbresource.ResourceService_Write_FullMethodName:      true,
	pbresource.ResourceService_WriteBatch_FullMethodName: true,
	pbresource.ResourceService_Delete_FullMethodName:     true,
	pbagent.LogService_Attach_FullMethodName:             true,
	// Register: only a Connect leaf counts (leafOnly), which must name
	// the instance registered; a session is what it registers.
	pbagent.AgentService_Register_FullMethodName: true,
}

// leafOnly lists the methods of provesAgents for which only a Connect
// leaf proves an agent, never a session.
var leafOnly = map[string]bool{
	pbagent.AgentService_Register_FullMethodName: true,
}

// agentIdentity is the public port's interceptor that marks a proven
// agent's calls (see above).
func (s *Server) agentIdentity() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if provesAgents[info.FullMethod] {
			if instance := s.provenAgent(ctx, leafOnly[info.FullMethod]); instance != "" {
				ctx = resource.AsAgent(ctx, instance)
			}
		}
		return handler(ctx, req)
	}
}

// agentIdentityStream is agentIdentity for streams.
func (s *Server) agentIdentityStream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if provesAgents[info.FullMethod] {
			if instance := s.provenAgent(ss.Context(), leafOnly[info.FullMethod]); instance != "" {
				ss = agentStream{ServerStream: ss, ctx: resource.AsAgent(ss.Context(), instance)}
			}
		}
		return handler(srv, ss)
	}
}

// agentStream is a stream whose context says which agent calls.
type agentStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (a agentStream) Context() context.Context { return a.ctx }

// provenAgent is the instance whose agent the call is proven to come
// from; "" when none. leaf: only by its Connect leaf.
func (s *Server) provenAgent(ctx context.Context, leaf bool) string {
	if p, ok := peer.FromContext(ctx); ok && s.cfg.TLS != nil {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
			if instance, err := s.cfg.TLS.ConnectAgent(ti.State.PeerCertificates); err == nil {
				return instance
			}
		}
	}
	if leaf || s.agentSessions == nil {
		return ""
	}
	md, _ := metadata.FromIncomingContext(ctx)
	instance, session := first(md.Get(resource.AgentInstanceMetadataKey)), first(md.Get(resource.AgentSessionMetadataKey))
	if instance == "" || session == "" {
		return ""
	}
	ok, err := s.agentSessions(ctx, instance, session)
	if err != nil {
		s.log.Warn("could not check an agent's session; taking the caller for no agent", "instance", instance, "error", err)
		return ""
	}
	if !ok {
		return ""
	}
	return instance
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}
