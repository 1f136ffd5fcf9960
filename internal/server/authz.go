package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pbcluster "trellis.dev/trellis/api/cluster/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	pbstorage "trellis.dev/trellis/api/storage/v1"
	"trellis.dev/trellis/internal/acl"
	"trellis.dev/trellis/internal/httpapi"
	"trellis.dev/trellis/internal/resource"
)

// methodPermissions is the permission every gRPC method of the server's
// own services needs; each module adds its methods' (module.Service), and
// the result is the one table the interceptors read. A method missing from
// it is refused (fail closed); TestEveryGRPCMethodDeclaresAPermission
// walks the served methods to keep it complete.
var methodPermissions = map[string]acl.Permission{
	// The resource service checks each resource against its type's ACL
	// hooks (namespace read/write for namespaced types, operator for
	// cluster-scoped ones), which is where the namespace is known.
	pbresource.ResourceService_Read_FullMethodName:          acl.PerResource,
	pbresource.ResourceService_Write_FullMethodName:         acl.PerResource,
	pbresource.ResourceService_WriteBatch_FullMethodName:    acl.PerResource,
	pbresource.ResourceService_WriteStatus_FullMethodName:   acl.PerResource,
	pbresource.ResourceService_WriteStatuses_FullMethodName: acl.PerResource,
	pbresource.ResourceService_List_FullMethodName:          acl.PerResource,
	pbresource.ResourceService_ListByOwner_FullMethodName:   acl.PerResource,
	pbresource.ResourceService_Delete_FullMethodName:        acl.PerResource,
	pbresource.ResourceService_WatchList_FullMethodName:     acl.PerResource,

	// Raw storage skips validation and the type hooks: servers only.
	pbstorage.Forwarding_Apply_FullMethodName:     acl.Server,
	pbstorage.Forwarding_Read_FullMethodName:      acl.Server,
	pbstorage.Forwarding_List_FullMethodName:      acl.Server,
	pbstorage.Forwarding_Snapshot_FullMethodName:  acl.Server,
	pbstorage.Forwarding_Restore_FullMethodName:   acl.Server,
	pbstorage.Forwarding_ReadIndex_FullMethodName: acl.Server,

	pbcluster.Cluster_Info_FullMethodName:       acl.Server,
	pbcluster.Cluster_Join_FullMethodName:       acl.Server,
	pbcluster.Cluster_RemovePeer_FullMethodName: acl.Server,

	// Reflection reveals schemas only, the ones api/ publishes; grpcurl
	// uses it before it knows how to send a token.
	"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo":      acl.Public,
	"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": acl.Public,
}

// MethodPermissions returns a copy of the permission every gRPC method of
// the server declares, its own and its modules', keyed by full method name
// ("/trellis.agent.v1.AgentService/Heartbeat").
func (s *Server) MethodPermissions() map[string]acl.Permission { return maps.Clone(s.authz.perms) }

// methodAuthorizer checks a call's method permission against the caller's
// Authorizer, resolved from the x-trellis-token metadata.
type methodAuthorizer struct {
	perms   map[string]acl.Permission
	resolve func(ctx context.Context) (acl.Authorizer, error)
}

func newMethodAuthorizer(resolve func(ctx context.Context) (acl.Authorizer, error)) *methodAuthorizer {
	if resolve == nil {
		resolve = func(context.Context) (acl.Authorizer, error) { return acl.AllowAll{}, nil }
	}
	return &methodAuthorizer{perms: maps.Clone(methodPermissions), resolve: resolve}
}

// add adds methods' permissions to the table, before the server serves.
// A method already there with another permission is refused: one method
// has one permission, on every port.
func (m *methodAuthorizer) add(perms map[string]acl.Permission) error {
	for _, method := range slices.Sorted(maps.Keys(perms)) {
		if p, ok := m.perms[method]; ok && p != perms[method] {
			return fmt.Errorf("gRPC method %s declares %v, and already %v", method, perms[method], p)
		}
	}
	maps.Copy(m.perms, perms)
	return nil
}

// check returns nil or a gRPC status error: PermissionDenied naming the
// permission, Unauthenticated when a token is required and missing.
func (m *methodAuthorizer) check(ctx context.Context, method string) error {
	perm, ok := m.perms[method]
	if !ok {
		return status.Errorf(codes.PermissionDenied, "permission denied: %s declares no permission, so it is closed", method)
	}
	if perm == acl.Public || perm == acl.PerResource {
		return nil
	}
	a, err := m.resolve(tokenContext(ctx))
	if err == nil {
		// The namespace permissions take theirs from the request, which
		// the resource service reads; no method here declares one.
		err = acl.Check(a, perm, "")
	}
	switch {
	case err == nil:
		return nil
	case status.Code(err) != codes.Unknown:
		return err
	case errors.Is(err, acl.ErrTokenRequired):
		return status.Error(codes.Unauthenticated, err.Error())
	case errors.Is(err, acl.ErrPermissionDenied):
		return status.Errorf(codes.PermissionDenied, "%s: %v", method, err)
	}
	return status.Error(codes.Internal, fmt.Sprintf("authorizing %s: internal error", method))
}

func (m *methodAuthorizer) unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := m.check(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

func (m *methodAuthorizer) stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := m.check(ss.Context(), info.FullMethod); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

// tokenContext carries the call's x-trellis-token metadata as the token
// resource.TokenFromContext returns, which is what resolvers read.
func tokenContext(ctx context.Context) context.Context {
	if resource.TokenFromContext(ctx) != "" {
		return ctx
	}
	if v := metadata.ValueFromIncomingContext(ctx, resource.TokenMetadataKey); len(v) > 0 && v[0] != "" {
		return resource.ContextWithToken(ctx, v[0])
	}
	return ctx
}

// HTTPRoutes returns every route of the HTTP API with the permission it
// declares (see httpapi.Handler.Routes).
func (s *Server) HTTPRoutes() []httpapi.Route { return s.httpAPI.Routes() }
