package server

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"trellis.dev/trellis/internal/module"
	"trellis.dev/trellis/internal/tlsutil"
)

// serverPortGate admits each call of the server-to-server port by who
// made it. The port's TLS takes servers of this datacenter and, on their
// certificate files, servers of the federation's other datacenters
// (tlsutil's ServerPort.Credentials); this gate serves the latter only
// the services that say AllDatacenters (the CA's federation: a
// secondary's leader asking the primary), and hands every method its
// caller (module.ServerCallerFrom). Raw storage, membership and forwarded
// heartbeats stay a matter of this datacenter's servers.
type serverPortGate struct {
	datacenter string
	// tls: the port serves TLS, so every call has a verified server.
	tls bool
	// allDatacenters holds the services served to every datacenter's
	// servers, filled as services are registered, before serving.
	allDatacenters map[string]bool
}

// admitServerCall decides whether a call of method on the server-to-server
// port goes on, from what the port's TLS verified of its caller (peer,
// verified) on a port that serves TLS or not (tlsOn), in datacenter own,
// where allDatacenters names the services served to every datacenter's
// servers. It returns the caller handed to the method.
func admitServerCall(method string, peer tlsutil.ServerPeer, verified, tlsOn bool, own string, allDatacenters map[string]bool) (module.ServerCaller, error) {
	switch {
	case !tlsOn:
		// A plaintext port proves nothing of anyone (the server warns
		// of it: WarnPlaintext).
		return module.ServerCaller{}, nil
	case !verified || peer.Datacenter == "":
		return module.ServerCaller{}, status.Errorf(codes.Unauthenticated, "%s: the server-to-server port serves verified servers only, and this call came over no verified server link", method)
	case peer.Datacenter == own:
		return module.ServerCaller{Datacenter: own}, nil
	case allDatacenters[serviceOf(method)]:
		return module.ServerCaller{Datacenter: peer.Datacenter}, nil
	}
	return module.ServerCaller{}, status.Errorf(codes.PermissionDenied,
		"permission denied: %s is served to the servers of datacenter %q only, and the caller is a server of %q", method, own, peer.Datacenter)
}

// serviceOf is the service of a full method name ("/pkg.Service/Method").
func serviceOf(method string) string {
	svc, _, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	return svc
}

func (g *serverPortGate) admit(ctx context.Context, method string) (context.Context, error) {
	peer, verified := tlsutil.ServerPeerFrom(ctx)
	caller, err := admitServerCall(method, peer, verified, g.tls, g.datacenter, g.allDatacenters)
	if err != nil {
		return nil, err
	}
	return module.WithServerCaller(ctx, caller), nil
}

func (g *serverPortGate) unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, err := g.admit(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

func (g *serverPortGate) stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, err := g.admit(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		return handler(srv, callerStream{ServerStream: ss, ctx: ctx})
	}
}

// callerStream is a server stream whose context carries its caller.
type callerStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s callerStream) Context() context.Context { return s.ctx }
