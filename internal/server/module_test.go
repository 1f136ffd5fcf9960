package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	pbcore "trellis.dev/trellis/api/core/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/acl"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/httpapi"
	"trellis.dev/trellis/internal/module"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/server"
)

// typesModule is a module of types only.
type typesModule struct {
	name     string
	register func(*resource.Registry)
}

func (m typesModule) Name() string                            { return m.name }
func (m typesModule) Register(r *resource.Registry)           { m.register(r) }
func (m typesModule) Setup(module.Deps) (module.Parts, error) { return module.Parts{}, nil }

// probeModule is a domain written the way a new one is, in this file
// alone: one type (test/v1/Probe), one controller that marks each Probe
// seen in its status, one HTTP route that reads a Probe, and one gRPC
// method. parts, when set, changes what Setup returns, to test refusals.
type probeModule struct {
	parts func(module.Parts) module.Parts
}

var probeType = &pbresource.Type{Group: "test", GroupVersion: "v1", Kind: "Probe"}

const (
	probeController = "probe-controller"
	probeEcho       = "/trellis.test.v1.Probe/Echo"
)

func (probeModule) Name() string { return "probe" }

func (probeModule) Register(r *resource.Registry) {
	r.Register(resource.Registration{Type: probeType, Proto: &pbcore.Namespace{}, Scope: resource.ScopeNamespace})
}

func (m probeModule) Setup(d module.Deps) (module.Parts, error) {
	if _, ok := d.Registry.Resolve(probeType); !ok {
		return module.Parts{}, errors.New("the registry lacks test/v1/Probe")
	}
	seen := controller.ReconcileFunc(func(ctx context.Context, req controller.Request) error {
		res, err := d.API.Read(ctx, &pbresource.ReadRequest{Id: req.ID})
		if status.Code(err) == codes.NotFound {
			return nil
		}
		if err != nil {
			return err
		}
		_, err = d.API.WriteStatus(ctx, &pbresource.WriteStatusRequest{
			Id: res.GetResource().GetId(), Version: res.GetResource().GetVersion(), Key: probeController,
			Status: &pbresource.Status{ObservedGeneration: res.GetResource().GetGeneration(),
				Conditions: []*pbresource.Condition{{Type: "Seen", State: pbresource.State_STATE_TRUE}}},
		})
		return err
	})
	read := func(w http.ResponseWriter, r *http.Request) error {
		p, err := httpapi.Params(r, "namespace")
		if err != nil {
			return err
		}
		res, err := d.API.Read(r.Context(), &pbresource.ReadRequest{Id: &pbresource.ID{
			Type: probeType, Tenancy: &pbresource.Tenancy{Namespace: p["namespace"]}, Name: r.PathValue("name")}})
		if err != nil {
			return err
		}
		httpapi.WriteJSON(w, http.StatusOK, map[string]any{"probe": httpapi.ToWire(d.Registry, res.GetResource())})
		return nil
	}
	parts := module.Parts{
		Controllers: []controller.Controller{{
			Name: probeController, ManagedType: probeType,
			Watches:    []controller.Watch{{Type: probeType, Map: controller.MapSelf}},
			Reconciler: seen,
		}},
		Routes: []httpapi.Route{{Pattern: "GET /v1/probes/{name}", Permission: acl.NamespaceRead, Handler: read}},
		PublicServices: []module.Service{{
			Desc: &probeServiceDesc, Impl: struct{}{},
			Permissions: map[string]acl.Permission{"Echo": acl.OperatorRead},
		}},
	}
	if m.parts != nil {
		parts = m.parts(parts)
	}
	return parts, nil
}

// probeServiceDesc is a gRPC service written out by hand, as protoc-gen-go-grpc
// would: Echo answers its string with "echo: " before it.
var probeServiceDesc = grpc.ServiceDesc{
	ServiceName: "trellis.test.v1.Probe",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Echo",
		Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			echo := func(context.Context, any) (any, error) { return wrapperspb.String("echo: " + in.GetValue()), nil }
			return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: probeEcho}, echo)
		},
	}},
}

// denyNope refuses the token "nope" and allows every other caller (the
// server's own bootstrap and controllers carry none).
func denyNope(ctx context.Context) (acl.Authorizer, error) {
	if resource.TokenFromContext(ctx) == "nope" {
		return acl.DenyAll{}, nil
	}
	return acl.AllowAll{}, nil
}

// A module added to the server's list is served, authorized and
// reconciled, with no edit to any shared package: its type through the
// generic resource API, its controller on the leader, its route and its
// method behind the permissions it declares, listed in the tables the
// permission tests walk.
func TestAddedModuleIsServedAuthorizedAndReconciled(t *testing.T) {
	srv, err := server.New(server.Config{
		HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:7702",
		Modules:   append(server.DefaultModules(), probeModule{}),
		Authorize: denyNope, ShutdownTimeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	runServer(t, srv)
	base := "http://" + srv.HTTPAddr()
	waitHealthy(t, base)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The type: written through the generic API, reconciled by the
	// module's controller.
	data, err := anypb.New(&pbcore.Namespace{Description: "a probe"})
	if err != nil {
		t.Fatal(err)
	}
	id := &pbresource.ID{Type: probeType, Tenancy: &pbresource.Tenancy{Namespace: "default"}, Name: "p-1"}
	if _, err := srv.API().Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: id, Data: data}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the probe controller's status", func() bool {
		res, err := srv.API().Read(ctx, &pbresource.ReadRequest{Id: id})
		st := res.GetResource().GetStatus()[probeController]
		return err == nil && len(st.GetConditions()) == 1 && st.GetConditions()[0].GetType() == "Seen"
	})

	// The route: served, and checked against its permission.
	get := func(token string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, base+"/v1/probes/p-1?namespace=default", nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("X-Trellis-Token", token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := get("")
	var got struct {
		Probe struct {
			Data   map[string]any `json:"data"`
			Status map[string]any `json:"status"`
		} `json:"probe"`
	}
	if err := json.Unmarshal([]byte(body), &got); code != http.StatusOK || err != nil || got.Probe.Data["description"] != "a probe" || got.Probe.Status[probeController] == nil {
		t.Errorf("GET /v1/probes/p-1: %d %s", code, body)
	}
	if code, body := get("nope"); code != http.StatusForbidden || !strings.Contains(body, "needs namespace:read") {
		t.Errorf("GET /v1/probes/p-1 with a refused token: %d %s, want 403 naming namespace:read", code, body)
	}
	// A parameter the route does not take is refused as the API's own are.
	if resp, err := http.Get(base + "/v1/probes/p-1?namespce=default"); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a misspelled parameter: %v %v, want 400", resp.StatusCode, err)
	}

	// The method: served on the public port, checked against its
	// permission.
	conn := dialGRPC(t, srv.GRPCAddr())
	out := new(wrapperspb.StringValue)
	if err := conn.Invoke(ctx, probeEcho, wrapperspb.String("hi"), out); err != nil || out.GetValue() != "echo: hi" {
		t.Errorf("Echo: %q, %v", out.GetValue(), err)
	}
	denied := metadata.AppendToOutgoingContext(ctx, resource.TokenMetadataKey, "nope")
	if err := conn.Invoke(denied, probeEcho, wrapperspb.String("hi"), out); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "needs operator:read") {
		t.Errorf("Echo with a refused token: %v, want PermissionDenied naming operator:read", err)
	}

	// Both are in the tables the permission tests walk.
	if p := srv.MethodPermissions()[probeEcho]; p != acl.OperatorRead {
		t.Errorf("the method table has %s as %v", probeEcho, p)
	}
	found := false
	for _, r := range srv.HTTPRoutes() {
		found = found || (r.Pattern == "GET /v1/probes/{name}" && r.Permission == acl.NamespaceRead)
	}
	if !found {
		t.Error("the route table lacks GET /v1/probes/{name}")
	}
}

// A module whose parts declare no permission for a route or a method, or
// one for a method its service lacks, or that clashes with what the
// server serves, fails server.New, naming the module and the part: it is
// refused at setup, not at the first request.
func TestModuleWithoutAPermissionIsRefusedAtSetup(t *testing.T) {
	noop := func(http.ResponseWriter, *http.Request) error { return nil }
	tests := []struct {
		name  string
		parts func(module.Parts) module.Parts
		is    error
		want  string
	}{
		{"route without a permission", func(p module.Parts) module.Parts {
			p.Routes = append(p.Routes, httpapi.Route{Pattern: "POST /v1/probes", Handler: noop})
			return p
		}, module.ErrUndeclared, `module probe: route "POST /v1/probes"`},
		{"method without a permission", func(p module.Parts) module.Parts {
			p.PublicServices[0].Permissions = map[string]acl.Permission{}
			return p
		}, module.ErrUndeclared, "module probe: trellis.test.v1.Probe.Echo"},
		{"permission of no method", func(p module.Parts) module.Parts {
			p.PublicServices[0].Permissions = map[string]acl.Permission{"Echo": acl.Agent, "Ech0": acl.Agent}
			return p
		}, module.ErrUndeclared, "trellis.test.v1.Probe.Ech0"},
		{"route the API serves", func(p module.Parts) module.Parts {
			p.Routes = append(p.Routes, httpapi.Route{Pattern: "GET /v1/health", Permission: acl.Public, Handler: noop})
			return p
		}, nil, `route "GET /v1/health"`},
		{"service a module serves", func(p module.Parts) module.Parts {
			p.PublicServices[0].Desc = &grpc.ServiceDesc{ServiceName: "trellis.resource.v1.ResourceService", HandlerType: (*any)(nil)}
			p.PublicServices[0].Permissions = nil
			return p
		}, nil, "trellis.resource.v1.ResourceService is registered twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, err := server.New(server.Config{
				HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:7702",
				Modules: append(server.DefaultModules(), probeModule{parts: tt.parts}),
			})
			if err == nil {
				runServer(t, srv)
				t.Fatal("server.New accepted the module")
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("err = %v, want one wrapping %v", err, tt.is)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one naming %q", err, tt.want)
			}
		})
	}
}

// Two modules with one name would make every error about them ambiguous.
func TestModulesNeedNamesOfTheirOwn(t *testing.T) {
	_, err := server.New(server.Config{
		HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:7702",
		Modules: append(server.DefaultModules(), probeModule{}, probeModule{}),
	})
	if !errors.Is(err, server.ErrConfig) || !strings.Contains(err.Error(), `"probe"`) {
		t.Errorf("err = %v, want a configuration error naming the module", err)
	}
	// Nor may two modules register one type.
	_, err = server.New(server.Config{
		HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:7702",
		Modules: append(server.DefaultModules(), typesModule{name: "again", register: core.Register}),
	})
	if !errors.Is(err, server.ErrConfig) || !strings.Contains(err.Error(), "module again: resource: core/v1/Namespace registered twice") {
		t.Errorf("err = %v, want a configuration error naming the module and the type", err)
	}
}
