package meshmodule

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pbcore "trellis.dev/trellis/api/core/v1"
	pbmesh "trellis.dev/trellis/api/mesh/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/mesh"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage/inmem"
)

func newOps(t *testing.T, withCatalog bool) operations {
	t.Helper()
	reg := resource.NewRegistry()
	core.Register(reg)
	if withCatalog {
		catalog.Register(reg)
	}
	mesh.Register(reg)
	return operations{api: resource.NewService(resource.Config{Backend: inmem.NewBackend(), Registry: reg}), reg: reg}
}

func put(t *testing.T, api resource.API, id *pbresource.ID, data *anypb.Any) {
	t.Helper()
	if _, err := api.Write(context.Background(), &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: id, Data: data}}); err != nil {
		t.Fatal(err)
	}
}

var l7 = &pbmesh.IntentionSource{Name: "admin", Permissions: []*pbmesh.IntentionPermission{{Action: "allow", Http: &pbmesh.IntentionHTTPMatch{PathPrefix: "/v1"}}}}

// The operations refuse a source namespace that does not exist and L7
// permissions for a destination that speaks tcp, naming the field, and
// write nothing; what passes is stored.
func TestOperationsCheckReferences(t *testing.T) {
	o := newOps(t, true)
	ctx := context.Background()
	ns, _ := anypb.New(&pbcore.Namespace{})
	put(t, o.api, resource.NamespaceID("payments"), ns)
	tcp, _ := anypb.New(&pbcatalog.Service{Protocol: "tcp"})
	put(t, o.api, catalog.ServiceID("default", "db"), tcp)
	web, _ := anypb.New(&pbcatalog.Service{Protocol: "http"})
	put(t, o.api, catalog.ServiceID("default", "api"), web)

	for _, tc := range []struct {
		name, dest string
		in         *pbmesh.Intentions
		want       string // "" stored
	}{
		{"a source namespace that exists", "api", &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{{Name: "billing", Namespace: "payments", Action: "allow"}}}, ""},
		{"a source namespace that does not", "api", &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{{Name: "web", Action: "allow"}, {Name: "billing", Namespace: "nope", Action: "allow"}}},
			`data.sources[1].namespace: namespace "nope" does not exist`},
		{"every namespace", "api", &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{{Name: "*", Namespace: "*", Action: "deny"}}}, ""},
		{"L7 on an http destination", "api", &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{l7}}, ""},
		{"L7 on a tcp destination", "db", &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{{Name: "web", Action: "allow"}, l7}},
			"data.sources[1].permissions: default/db speaks protocol tcp"},
		{"an action on a tcp destination", "db", &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{{Name: "web", Action: "allow"}}}, ""},
		{"L7 on a destination not in the catalog", "search", &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{l7}}, ""},
		{"the hooks still run", "api", &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{{Name: "web"}}}, "data.sources[0].action: is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := o.api.Read(ctx, &pbresource.ReadRequest{Id: mesh.IntentionsID("", tc.dest)})
			_, err := o.write(ctx, "default", tc.dest, tc.in, "")
			if tc.want == "" {
				if err != nil {
					t.Fatalf("write = %v, want it stored", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("write = %v, want a refusal containing %q", err, tc.want)
			}
			if c := status.Code(err); c != codes.FailedPrecondition && c != codes.InvalidArgument {
				t.Fatalf("write = %v (%s), want FailedPrecondition or InvalidArgument", err, c)
			}
			after, _ := o.api.Read(ctx, &pbresource.ReadRequest{Id: mesh.IntentionsID("", tc.dest)})
			if before.GetResource().GetVersion() != after.GetResource().GetVersion() {
				t.Fatalf("a refused write changed %s: version %s to %s", tc.dest, before.GetResource().GetVersion(), after.GetResource().GetVersion())
			}
		})
	}
}

// Without the catalog in the server, L7 permissions are not checked
// against a protocol (there is none to read).
func TestOperationsWithoutCatalog(t *testing.T) {
	o := newOps(t, false)
	if _, err := o.write(context.Background(), "default", "api", &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{l7}}, ""); err != nil {
		t.Fatal(err)
	}
}

// The routes: PUT writes (a stale version is a conflict), DELETE deletes,
// unknown fields and parameters are refused by name.
func TestOperationRoutes(t *testing.T) {
	o := newOps(t, true)
	mux := http.NewServeMux()
	for _, r := range o.routes() {
		mux.HandleFunc(r.Pattern, func(w http.ResponseWriter, req *http.Request) {
			if err := r.Handler(w, req); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
			}
		})
	}
	do := func(method, target, body string) (int, string) {
		t.Helper()
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(method, target, strings.NewReader(body)))
		return rec.Code, rec.Body.String()
	}
	if code, body := do("PUT", "/v1/intentions/api", `{"data":{"sources":[{"name":"web","action":"allow"}]},"version":"0"}`); code != 200 || !strings.Contains(body, `"name":"api"`) {
		t.Fatalf("PUT = %d %s", code, body)
	}
	if code, body := do("PUT", "/v1/intentions/api", `{"data":{"sources":[{"name":"web","action":"deny"}]},"version":"0"}`); code == 200 || !strings.Contains(body, "conflict") {
		t.Fatalf("PUT create-only over an existing one = %d %s, want a conflict", code, body)
	}
	if code, body := do("PUT", "/v1/intentions/api?namespce=x", `{"data":{"sources":[{"name":"web","action":"allow"}]}}`); code == 200 || !strings.Contains(body, "namespce") {
		t.Fatalf("PUT with a misspelled parameter = %d %s", code, body)
	}
	if code, body := do("PUT", "/v1/intentions/api", `{"data":{"sources":[{"name":"web","acton":"allow"}]}}`); code == 200 || !strings.Contains(body, "acton") {
		t.Fatalf("PUT with an unknown field = %d %s", code, body)
	}
	if code, body := do("DELETE", "/v1/intentions/api", ""); code != 200 {
		t.Fatalf("DELETE = %d %s", code, body)
	}
	if _, err := o.api.Read(context.Background(), &pbresource.ReadRequest{Id: mesh.IntentionsID("", "api")}); status.Code(err) != codes.NotFound {
		t.Fatalf("after DELETE, read = %v", err)
	}
}
