package mesh_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	pbmesh "trellis.dev/trellis/api/mesh/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/mesh"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage/inmem"
)

func newService(t *testing.T) *resource.Service {
	t.Helper()
	reg := resource.NewRegistry()
	core.Register(reg)
	mesh.Register(reg)
	return resource.NewService(resource.Config{Backend: inmem.NewBackend(), Registry: reg})
}

func resourceOf(t *testing.T, id *pbresource.ID, m proto.Message) *pbresource.Resource {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return &pbresource.Resource{Id: id, Data: a}
}

func allow(name string) *pbmesh.IntentionSource {
	return &pbmesh.IntentionSource{Name: name, Action: "allow"}
}

func perm(action string, h *pbmesh.IntentionHTTPMatch) *pbmesh.IntentionPermission {
	return &pbmesh.IntentionPermission{Action: action, Http: h}
}

// Every bad Intentions is refused by the type's hooks, naming its field
// and the reason, and nothing is stored. (The writes carry the
// operations' mark, as the mesh's operations do: the generic write
// refuses the type.)
func TestIntentionsRefused(t *testing.T) {
	svc := newService(t)
	ctx := resource.FromOperations(context.Background())
	for _, tc := range []struct {
		name string
		in   *pbmesh.Intentions
		want string
	}{
		{"no sources", &pbmesh.Intentions{}, "data.sources: is empty"},
		{"action and permissions", &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{{Name: "web", Action: "allow", Permissions: []*pbmesh.IntentionPermission{perm("allow", &pbmesh.IntentionHTTPMatch{PathPrefix: "/"})}}}},
			"data.sources[0].action: is given with permissions"},
		{"neither", &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{{Name: "web"}}}, "data.sources[0].action: is required"},
		{"unknown action", &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{{Name: "web", Action: "maybe"}}}, `data.sources[0].action: "maybe" is not an action`},
		{"no name", &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{{Action: "allow"}}}, "data.sources[0].name: is required"},
		{"bad name", &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{allow("Web!")}}, `data.sources[0].name: "Web!" is not a service name`},
		{"bad namespace", &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{{Name: "web", Namespace: "a_b", Action: "allow"}}}, `data.sources[0].namespace: "a_b" is not a namespace`},
		{"a name in every namespace", &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{{Name: "web", Namespace: "*", Action: "allow"}}}, `data.sources[0].name: "web" in every namespace`},
		{"a source twice", &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{allow("web"), {Name: "web", Namespace: "default", Action: "deny"}}}, "data.sources[1]: names default/web again (sources[0] does)"},
		{"invalid path regex", &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{{Name: "web", Permissions: []*pbmesh.IntentionPermission{perm("allow", &pbmesh.IntentionHTTPMatch{PathRegex: "/a(b"})}}}},
			`data.sources[0].permissions[0].http.path_regex: "/a(b" is not an RE2 regular expression`},
		{"a Perl regex RE2 lacks", &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{{Name: "web", Permissions: []*pbmesh.IntentionPermission{perm("allow", &pbmesh.IntentionHTTPMatch{PathRegex: `/(?!admin)`})}}}},
			"http.path_regex: \"/(?!admin)\" is not an RE2 regular expression"},
		{"unknown method", &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{{Name: "web", Permissions: []*pbmesh.IntentionPermission{perm("allow", &pbmesh.IntentionHTTPMatch{Methods: []string{"GET", "FETCH"}})}}}},
			`data.sources[0].permissions[0].http.methods[1]: "FETCH" is not an HTTP method`},
		{"a method twice", &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{{Name: "web", Permissions: []*pbmesh.IntentionPermission{perm("allow", &pbmesh.IntentionHTTPMatch{Methods: []string{"GET", "get"}})}}}},
			"http.methods[1]: GET is named twice"},
		{"two paths", &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{{Name: "web", Permissions: []*pbmesh.IntentionPermission{perm("allow", &pbmesh.IntentionHTTPMatch{PathExact: "/a", PathPrefix: "/b"})}}}},
			"http.path_exact: path_exact, path_prefix and path_regex are alternatives"},
		{"a relative path", &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{{Name: "web", Permissions: []*pbmesh.IntentionPermission{perm("allow", &pbmesh.IntentionHTTPMatch{PathPrefix: "v1"})}}}},
			`http.path_prefix: "v1" does not begin with "/"`},
		{"an empty match", &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{{Name: "web", Permissions: []*pbmesh.IntentionPermission{perm("allow", &pbmesh.IntentionHTTPMatch{})}}}},
			"data.sources[0].permissions[0].http: matches every request"},
		{"no http", &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{{Name: "web", Permissions: []*pbmesh.IntentionPermission{{Action: "allow"}}}}},
			"data.sources[0].permissions[0].http: is required"},
		{"a permission's action", &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{{Name: "web", Permissions: []*pbmesh.IntentionPermission{perm("", &pbmesh.IntentionHTTPMatch{PathPrefix: "/"})}}}},
			`data.sources[0].permissions[0].action: "" is not an action`},
		{"a header of two kinds", &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{{Name: "web", Permissions: []*pbmesh.IntentionPermission{perm("allow", &pbmesh.IntentionHTTPMatch{Headers: []*pbmesh.IntentionHeaderMatch{{Name: "x", Exact: "a", Prefix: "b"}}})}}}},
			"http.headers[0]: gives 2 of present, exact, prefix, suffix and regex"},
		{"a header of no kind", &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{{Name: "web", Permissions: []*pbmesh.IntentionPermission{perm("allow", &pbmesh.IntentionHTTPMatch{Headers: []*pbmesh.IntentionHeaderMatch{{Name: "x", Invert: true}}})}}}},
			"http.headers[0]: gives 0 of present"},
		{"a header without a name", &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{{Name: "web", Permissions: []*pbmesh.IntentionPermission{perm("allow", &pbmesh.IntentionHTTPMatch{Headers: []*pbmesh.IntentionHeaderMatch{{Present: true}}})}}}},
			"http.headers[0].name: is required"},
		{"a header name with a space", &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{{Name: "web", Permissions: []*pbmesh.IntentionPermission{perm("allow", &pbmesh.IntentionHTTPMatch{Headers: []*pbmesh.IntentionHeaderMatch{{Name: "x y", Present: true}}})}}}},
			`http.headers[0].name: "x y" is not a header name`},
		{"an invalid header regex", &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{{Name: "web", Permissions: []*pbmesh.IntentionPermission{perm("allow", &pbmesh.IntentionHTTPMatch{Headers: []*pbmesh.IntentionHeaderMatch{{Name: "x", Regex: "["}}})}}}},
			`http.headers[0].regex: "[" is not an RE2 regular expression`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := svc.Write(ctx, &pbresource.WriteRequest{Resource: resourceOf(t, mesh.IntentionsID("", "api"), tc.in)})
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("write = %v, want InvalidArgument containing %q", err, tc.want)
			}
			if _, err := svc.Read(ctx, &pbresource.ReadRequest{Id: mesh.IntentionsID("", "api")}); status.Code(err) != codes.NotFound {
				t.Fatalf("after a refused write, read = %v, want NotFound", err)
			}
		})
	}
}

// A good Intentions is stored with its sources' namespaces filled in and
// its methods in upper case, and compiles back into what Decide reads.
func TestIntentionsStored(t *testing.T) {
	svc := newService(t)
	ctx := resource.FromOperations(context.Background())
	in := &pbmesh.Intentions{Description: "who calls api", Sources: []*pbmesh.IntentionSource{
		allow("web"),
		{Name: "*", Namespace: "*", Action: "deny"},
		{Name: "admin", Permissions: []*pbmesh.IntentionPermission{
			perm("allow", &pbmesh.IntentionHTTPMatch{PathRegex: "/v[12]/.*", Methods: []string{"get", "Post"}, Headers: []*pbmesh.IntentionHeaderMatch{{Name: "X-Team", Suffix: "-ops", Invert: true}}}),
		}},
	}}
	out, err := svc.Write(ctx, &pbresource.WriteRequest{Resource: resourceOf(t, mesh.IntentionsID("", "api"), in)})
	if err != nil {
		t.Fatal(err)
	}
	stored, err := resource.DecodeData[*pbmesh.Intentions](out.GetResource())
	if err != nil {
		t.Fatal(err)
	}
	if ns := stored.GetSources()[0].GetNamespace(); ns != "default" {
		t.Errorf("source namespace stored as %q, want the destination's (default)", ns)
	}
	if ns := stored.GetSources()[1].GetNamespace(); ns != "*" {
		t.Errorf("wildcard namespace stored as %q", ns)
	}
	if m := stored.GetSources()[2].GetPermissions()[0].GetHttp().GetMethods(); strings.Join(m, ",") != "GET,POST" {
		t.Errorf("methods stored as %v, want GET,POST", m)
	}
	rules, err := mesh.IntentionsOf(out.GetResource())
	if err != nil {
		t.Fatal(err)
	}
	d := mesh.Decide(mesh.Request{Source: mesh.Service{Namespace: "default", Name: "admin"}, Destination: mesh.Service{Namespace: "default", Name: "api"},
		HTTP: &mesh.HTTPRequest{Path: "/v2/items", Method: "POST", Header: map[string][]string{"x-team": {"payments"}}}}, []mesh.Intentions{rules}, mesh.Deny)
	if !d.Allowed || d.Rule == nil || d.Rule.Permission != 0 {
		t.Fatalf("decision %+v, want allowed by permission 0", d)
	}
	d = mesh.Decide(mesh.Request{Source: mesh.Service{Namespace: "other", Name: "db"}, Destination: mesh.Service{Namespace: "default", Name: "api"}}, []mesh.Intentions{rules}, mesh.Allow)
	if d.Allowed || d.Rule == nil || d.Rule.Precedence != 7 {
		t.Fatalf("decision %+v, want denied by the wildcard source (precedence 7)", d)
	}
}

// The generic write and delete refuse Intentions, pointing at the mesh's
// operations, and write nothing: they alone check the source namespaces
// and the destination's protocol.
func TestIntentionsOnlyThroughOperations(t *testing.T) {
	svc := newService(t)
	ctx := context.Background()
	good := resourceOf(t, mesh.IntentionsID("", "api"), &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{allow("web")}})
	if _, err := svc.Write(ctx, &pbresource.WriteRequest{Resource: good}); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "PUT /v1/intentions/{destination}") {
		t.Fatalf("generic write = %v, want FailedPrecondition naming PUT /v1/intentions/{destination}", err)
	}
	if _, err := svc.Read(ctx, &pbresource.ReadRequest{Id: mesh.IntentionsID("", "api")}); status.Code(err) != codes.NotFound {
		t.Fatalf("after a refused write, read = %v, want NotFound", err)
	}
	if _, err := svc.Write(resource.FromOperations(ctx), &pbresource.WriteRequest{Resource: good}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Delete(ctx, &pbresource.DeleteRequest{Id: mesh.IntentionsID("", "api")}); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "DELETE /v1/intentions/{destination}") {
		t.Fatalf("generic delete = %v, want FailedPrecondition naming DELETE /v1/intentions/{destination}", err)
	}
	if _, err := svc.Read(ctx, &pbresource.ReadRequest{Id: mesh.IntentionsID("", "api")}); err != nil {
		t.Fatalf("after a refused delete, read = %v", err)
	}
}

func TestMeshConfig(t *testing.T) {
	svc := newService(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		id   *pbresource.ID
		c    *pbmesh.MeshConfig
		want string
	}{
		{"another name", &pbresource.ID{Type: mesh.MeshConfigType, Tenancy: &pbresource.Tenancy{}, Name: "other"}, &pbmesh.MeshConfig{}, `id.name: must be "default"`},
		{"unknown action", mesh.MeshConfigID(), &pbmesh.MeshConfig{DefaultIntention: "maybe"}, `data.default_intention: "maybe" is not an action`},
		{"unknown mode", mesh.MeshConfigID(), &pbmesh.MeshConfig{MtlsMode: "loose"}, `data.mtls_mode: "loose" is not a mode`},
		{"a port out of range", mesh.MeshConfigID(), &pbmesh.MeshConfig{TransparentProxy: &pbmesh.TransparentProxyDefaults{OutboundPort: 70000}}, "data.transparent_proxy.outbound_port: 70000 is not a port"},
		{"a bad CIDR", mesh.MeshConfigID(), &pbmesh.MeshConfig{TransparentProxy: &pbmesh.TransparentProxyDefaults{ExcludeOutboundCidrs: []string{"10.0.0.0/8", "10.1"}}}, `data.transparent_proxy.exclude_outbound_cidrs[1]: "10.1" is not a CIDR`},
		{"an excluded port 0", mesh.MeshConfigID(), &pbmesh.MeshConfig{TransparentProxy: &pbmesh.TransparentProxyDefaults{ExcludeInboundPorts: []uint32{0}}}, "data.transparent_proxy.exclude_inbound_ports[0]: 0 is not a port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := svc.Write(ctx, &pbresource.WriteRequest{Resource: resourceOf(t, tc.id, tc.c)})
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("write = %v, want InvalidArgument containing %q", err, tc.want)
			}
		})
	}
	out, err := svc.Write(ctx, &pbresource.WriteRequest{Resource: resourceOf(t, mesh.MeshConfigID(), &pbmesh.MeshConfig{})})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := resource.DecodeData[*pbmesh.MeshConfig](out.GetResource())
	if mesh.DefaultActionOf(c) != mesh.Allow || c.GetMtlsMode() != mesh.MTLSStrict || c.GetTransparentProxy().GetOutboundPort() != mesh.DefaultOutboundPort {
		t.Fatalf("stored %v, want the defaults", c)
	}
	if _, err := svc.Delete(ctx, &pbresource.DeleteRequest{Id: mesh.MeshConfigID()}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("delete of MeshConfig = %v, want FailedPrecondition", err)
	}
	if got := mesh.DefaultActionOf(nil); got != mesh.Deny {
		t.Fatalf("default action of no MeshConfig = %s, want deny (fail closed)", got)
	}
}

// The index files each Intentions under its destination.
func TestIntentionsByDestination(t *testing.T) {
	c := controller.NewCache()
	if err := c.Declare(controller.CachedType{Type: mesh.IntentionsType, Indexes: []*controller.Index{mesh.IntentionsByDestination}}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []*pbresource.ID{mesh.IntentionsID("", "api"), mesh.IntentionsID("team", "api"), mesh.IntentionsID("", "db")} {
		r := resourceOf(t, id, &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{allow("web")}})
		r.Id.Uid, r.Version = "u-"+id.GetTenancy().GetNamespace()+id.GetName(), "1"
		c.Apply(controller.Event{Resource: r})
	}
	got := c.ByIndex(mesh.IntentionsType, mesh.IntentionsByDestination.Name, mesh.DestinationKey("team", "api"))
	if len(got) != 1 || got[0].Resource.GetId().GetTenancy().GetNamespace() != "team" || got[0].Resource.GetId().GetName() != "api" {
		t.Fatalf("ByIndex(team/api) = %v, want the one Intentions of team/api", got)
	}
	if got := c.ByIndex(mesh.IntentionsType, mesh.IntentionsByDestination.Name, mesh.DestinationKey("default", "web")); len(got) != 0 {
		t.Fatalf("ByIndex(default/web) = %v, want none", got)
	}
}
