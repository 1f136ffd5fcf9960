package module

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"trellis.dev/trellis/internal/acl"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/httpapi"
)

var pingDesc = &grpc.ServiceDesc{
	ServiceName: "trellis.test.v1.Ping",
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Ping"}},
	Streams:     []grpc.StreamDesc{{StreamName: "Watch", ServerStreams: true}},
}

type runFunc func(ctx context.Context) error

func (f runFunc) Start(ctx context.Context) error { return f(ctx) }

// Check lets through what declares a permission for every route and
// method, and refuses, naming it, each part that does not.
func TestPartsCheck(t *testing.T) {
	handler := func(http.ResponseWriter, *http.Request) error { return nil }
	both := map[string]acl.Permission{"Ping": acl.Agent, "Watch": acl.Agent}
	tests := []struct {
		name  string
		parts Parts
		is    error
		want  string
	}{
		{name: "nothing"},
		{name: "all declared", parts: Parts{
			Controllers:    []controller.Controller{{Name: "c"}},
			PublicServices: []Service{{Desc: pingDesc, Impl: struct{}{}, Permissions: both}},
			ServerServices: []Service{{Desc: pingDesc, Impl: struct{}{}, Permissions: both}},
			Routes:         []httpapi.Route{{Pattern: "GET /v1/pings", Permission: acl.NamespaceRead, Handler: handler}},
			Runnables:      []Runnable{{Name: "r", Run: runFunc(func(context.Context) error { return nil })}},
		}},
		{name: "route without a permission", is: ErrUndeclared, want: `route "GET /v1/pings"`, parts: Parts{
			Routes: []httpapi.Route{{Pattern: "GET /v1/pings", Handler: handler}},
		}},
		{name: "route without a handler", want: `route "GET /v1/pings": no handler`, parts: Parts{
			Routes: []httpapi.Route{{Pattern: "GET /v1/pings", Permission: acl.Public}},
		}},
		{name: "stream without a permission", is: ErrUndeclared, want: "trellis.test.v1.Ping.Watch", parts: Parts{
			PublicServices: []Service{{Desc: pingDesc, Impl: struct{}{}, Permissions: map[string]acl.Permission{"Ping": acl.Agent}}},
		}},
		{name: "method declared undeclared", is: ErrUndeclared, want: "trellis.test.v1.Ping.Ping", parts: Parts{
			ServerServices: []Service{{Desc: pingDesc, Impl: struct{}{}, Permissions: map[string]acl.Permission{"Ping": acl.Undeclared, "Watch": acl.Agent}}},
		}},
		{name: "permission of no method", is: ErrUndeclared, want: "trellis.test.v1.Ping.Pong: undeclared permission: the service has no such method", parts: Parts{
			PublicServices: []Service{{Desc: pingDesc, Impl: struct{}{}, Permissions: map[string]acl.Permission{"Ping": acl.Agent, "Watch": acl.Agent, "Pong": acl.Agent}}},
		}},
		{name: "service without an implementation", want: "needs its Desc and its Impl", parts: Parts{
			PublicServices: []Service{{Desc: pingDesc, Permissions: both}},
		}},
		{name: "runnable without a name", want: "needs a name", parts: Parts{
			Runnables: []Runnable{{Run: runFunc(func(context.Context) error { return nil })}},
		}},
		{name: "controller without a name", want: "no name", parts: Parts{
			Controllers: []controller.Controller{{}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.parts.Check()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Check = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Check = %v, want an error naming %q", err, tt.want)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("Check = %v, want one wrapping %v", err, tt.is)
			}
		})
	}
}

// FullPermissions keys each method by the name the gRPC interceptors see.
func TestFullPermissions(t *testing.T) {
	got, err := Service{Desc: pingDesc, Impl: struct{}{}, Permissions: map[string]acl.Permission{"Ping": acl.Agent, "Watch": acl.Server}}.FullPermissions()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]acl.Permission{"/trellis.test.v1.Ping/Ping": acl.Agent, "/trellis.test.v1.Ping/Watch": acl.Server}
	if len(got) != len(want) || got["/trellis.test.v1.Ping/Ping"] != acl.Agent || got["/trellis.test.v1.Ping/Watch"] != acl.Server {
		t.Errorf("FullPermissions = %v, want %v", got, want)
	}
}
