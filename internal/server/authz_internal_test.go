package server

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pbagent "trellis.dev/trellis/api/agent/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/acl"
	"trellis.dev/trellis/internal/resource"
)

// TestMethodAuthorizerCheck: the interceptors' decision, method by
// method, for each thing a resolver can answer.
func TestMethodAuthorizerCheck(t *testing.T) {
	heartbeat := pbagent.AgentService_Heartbeat_FullMethodName
	tests := []struct {
		name     string
		method   string
		resolved acl.Authorizer
		err      error
		code     codes.Code
		msg      string
		resolves bool
	}{
		{name: "allowed", method: heartbeat, resolved: acl.AllowAll{}, code: codes.OK, resolves: true},
		{name: "refused names the permission", method: heartbeat, resolved: acl.DenyAll{}, code: codes.PermissionDenied, msg: "needs agent", resolves: true},
		{name: "undeclared method is closed", method: "/trellis.new.v1.Thing/Do", resolved: acl.AllowAll{}, code: codes.PermissionDenied, msg: "declares no permission"},
		{name: "per-resource resolves nothing", method: pbresource.ResourceService_Read_FullMethodName, resolved: acl.DenyAll{}, code: codes.OK},
		{name: "public resolves nothing", method: "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", resolved: acl.DenyAll{}, code: codes.OK},
		{name: "missing token", method: heartbeat, err: acl.ErrTokenRequired, code: codes.Unauthenticated, msg: "token is required", resolves: true},
		{name: "unknown token", method: heartbeat, err: errors.Join(acl.ErrPermissionDenied, errors.New("token not found")), code: codes.PermissionDenied, msg: "token not found", resolves: true},
		{name: "resolver status kept", method: heartbeat, err: status.Error(codes.Unavailable, "acl store down"), code: codes.Unavailable, resolves: true},
		{name: "resolver fault hidden", method: heartbeat, err: errors.New("secret detail 0xdead"), code: codes.Internal, msg: "internal error", resolves: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var token string
			resolved := false
			m := newMethodAuthorizer(func(ctx context.Context) (acl.Authorizer, error) {
				resolved, token = true, resource.TokenFromContext(ctx)
				return tt.resolved, tt.err
			})
			// As the orchestrator's module declares it.
			if err := m.add(map[string]acl.Permission{heartbeat: acl.Agent}); err != nil {
				t.Fatal(err)
			}
			ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(resource.TokenMetadataKey, "tok"))
			err := m.check(ctx, tt.method)
			if status.Code(err) != tt.code {
				t.Fatalf("err = %v, want %v", err, tt.code)
			}
			if tt.msg != "" && !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("message %q lacks %q", err, tt.msg)
			}
			if strings.Contains(status.Convert(err).Message(), "0xdead") {
				t.Error("an internal failure leaked its detail")
			}
			if resolved != tt.resolves {
				t.Errorf("resolved = %v, want %v", resolved, tt.resolves)
			}
			if resolved && token != "tok" {
				t.Errorf("the resolver saw token %q, want the metadata's", token)
			}
		})
	}
}

// One method has one permission on every port: a module may declare a
// method the table holds only with the permission it already has.
func TestMethodAuthorizerAdd(t *testing.T) {
	m := newMethodAuthorizer(nil)
	heartbeat := pbagent.AgentService_Heartbeat_FullMethodName
	if err := m.add(map[string]acl.Permission{heartbeat: acl.Agent}); err != nil {
		t.Fatal(err)
	}
	if err := m.add(map[string]acl.Permission{heartbeat: acl.Agent}); err != nil {
		t.Errorf("the same permission again: %v", err)
	}
	if err := m.add(map[string]acl.Permission{heartbeat: acl.Public}); err == nil || !strings.Contains(err.Error(), "declares public, and already agent") {
		t.Errorf("another permission: %v", err)
	}
	if err := m.add(map[string]acl.Permission{pbresource.ResourceService_Write_FullMethodName: acl.Public}); err == nil {
		t.Error("a module reopened a method of the server's own")
	}
	if m.perms[heartbeat] != acl.Agent || m.perms[pbresource.ResourceService_Write_FullMethodName] != acl.PerResource {
		t.Errorf("a refused add changed the table: %v", m.perms)
	}
	if methodPermissions[heartbeat] != acl.Undeclared {
		t.Error("add changed the server's own table, which every server shares")
	}
}
