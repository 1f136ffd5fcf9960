package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	pbca "trellis.dev/trellis/api/ca/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/acl"
	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/mesh"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/server"
	"trellis.dev/trellis/internal/testcluster"
)

// fullServers runs the two shapes of server, every route turned on
// (debug included): in memory, and a single-server Raft cluster.
func fullServers(t *testing.T, authorize func(context.Context) (acl.Authorizer, error)) []*server.Server {
	t.Helper()
	mem, err := server.New(server.Config{
		HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:7702",
		EnableDebug: true, Authorize: authorize, ShutdownTimeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	ports, err := testcluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	raft, err := server.New(server.Config{
		HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", RaftAddr: fmt.Sprintf("127.0.0.1:%d", ports[0]),
		Raft:        &server.RaftConfig{DataDir: t.TempDir(), BootstrapExpect: 1, SingleServer: true},
		EnableDebug: true, Authorize: authorize, ShutdownTimeout: 20 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Started, so that the test's end stops them and frees their ports.
	runServer(t, mem)
	runServer(t, raft)
	return []*server.Server{mem, raft}
}

// Every route of a fully built server declares a permission, and the
// routes that matter most declare the one the docs promise.
func TestEveryHTTPRouteDeclaresAPermission(t *testing.T) {
	want := map[string]acl.Permission{
		"GET /v1/health":                        acl.Public,
		"GET /v1/metrics":                       acl.OperatorRead,
		"GET /v1/snapshot":                      acl.OperatorWrite,
		"PUT /v1/snapshot":                      acl.OperatorWrite,
		"DELETE /v1/operator/raft/peers/{peer}": acl.OperatorWrite,
		"GET /v1/operator/raft/peers":           acl.OperatorRead,
		"POST /v1/environments":                 acl.NamespaceWrite,
		"GET /v1/environments/{name}/status":    acl.NamespaceRead,
		"POST /v1/environments/{name}/rollback": acl.NamespaceWrite,
		"PUT /v1/batch":                         acl.PerResource,
		"GET /v1/ca/roots":                      acl.Public,
		"GET /v1/ca/config":                     acl.OperatorRead,
		"POST /v1/ca/sign":                      acl.OperatorWrite,
		"GET /v1/debug/pprof/profile":           acl.OperatorRead,
	}
	for _, srv := range fullServers(t, nil) {
		routes := srv.HTTPRoutes()
		if len(routes) < 30 {
			t.Fatalf("only %d routes: the server is not fully built", len(routes))
		}
		seen := map[string]bool{}
		for _, r := range routes {
			if !r.Permission.Declared() {
				t.Errorf("%s declares no permission", r.Pattern)
			}
			if seen[r.Pattern] {
				t.Errorf("%s registered twice", r.Pattern)
			}
			seen[r.Pattern] = true
			if p, ok := want[r.Pattern]; ok && p != r.Permission {
				t.Errorf("%s declares %v, want %v", r.Pattern, r.Permission, p)
			}
		}
		for p := range want {
			if !seen[p] {
				t.Errorf("no route %s", p)
			}
		}
	}
}

// sampleRequest fills a route's pattern with values a real client would
// send, and a body where the route reads one.
func sampleRequest(t *testing.T, srv *server.Server, pattern string) (method, path, body string) {
	method, path, ok := strings.Cut(pattern, " ")
	if !ok {
		t.Fatalf("%s: a route that answers every method must be public", pattern)
	}
	path = strings.NewReplacer(
		"{group}/{version}/{kind}", "core/v1/Namespace",
		"{name}", "team-b", "{id}", "d-1", "{peer}", srv.RaftAddr(),
	).Replace(path)
	switch {
	case strings.HasPrefix(path, "/v1/debug/pprof/"):
		path += "?seconds=1"
	case path == "/v1/batch":
		body = `{"resources":[{"type":"core/v1/Namespace","name":"team-a","data":{}}]}`
	case strings.HasPrefix(path, "/v1/resources/") && method == http.MethodPut:
		body = `{"data":{"description":"changed"}}`
	case path == "/v1/snapshot" && method == http.MethodPut:
		body = "not a snapshot"
	case method == http.MethodPost || method == http.MethodPut:
		body = `{"name":"default","version":"v"}`
	}
	return method, path, body
}

// With an authorizer that refuses every token, every route that is not
// public answers 403 naming what it needs, and nothing is written.
// Requests without a token (the server's own bootstrap and controllers)
// are allowed, so the server comes up.
func TestDenyAllRefusesEveryHTTPRoute(t *testing.T) {
	authorize := func(ctx context.Context) (acl.Authorizer, error) {
		if resource.TokenFromContext(ctx) == "" {
			return acl.AllowAll{}, nil
		}
		return acl.DenyAll{}, nil
	}
	for _, srv := range fullServers(t, authorize) {
		base := "http://" + srv.HTTPAddr()
		waitHealthy(t, base)
		eventually(t, 30*time.Second, "the default namespace", func() bool {
			return slices.ContainsFunc(storeState(t, srv), func(s string) bool { return strings.HasPrefix(s, "Namespace//default@") })
		})
		// The CA manager writes its root and then its status in the
		// background; wait for it, so that its writes are not taken for
		// the refused requests'.
		eventually(t, 30*time.Second, "the CA manager ready", func() bool {
			resp, err := srv.API().Read(context.Background(), &pbresource.ReadRequest{Id: ca.ConfigID()})
			var st pbca.CAManagerStatus
			return err == nil && resp.GetResource().GetStatus()[ca.ManagerStatusKey].GetData().UnmarshalTo(&st) == nil && st.GetState() == ca.StateReady
		})
		// So does the mesh module's controller, the MeshConfig.
		eventually(t, 30*time.Second, "the MeshConfig", func() bool {
			_, err := srv.API().Read(context.Background(), &pbresource.ReadRequest{Id: mesh.MeshConfigID()})
			return err == nil
		})
		// A namespace the requests below may read, change and delete.
		ns, err := core.NewNamespace("team-b", "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := srv.API().Write(context.Background(), &pbresource.WriteRequest{Resource: ns}); err != nil {
			t.Fatal(err)
		}
		before := storeState(t, srv)
		checked := 0
		for _, r := range srv.HTTPRoutes() {
			if r.Permission == acl.Public {
				continue
			}
			checked++
			method, path, body := sampleRequest(t, srv, r.Pattern)
			req, err := http.NewRequest(method, base+path, strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("X-Trellis-Token", "nope")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var e wire.Error
			_ = json.Unmarshal(b, &e)
			if resp.StatusCode != http.StatusForbidden || e.Code != wire.CodePermissionDenied {
				t.Errorf("%s (%s %s): %d %s, want 403", r.Pattern, method, path, resp.StatusCode, b)
				continue
			}
			if r.Permission != acl.PerResource && !strings.Contains(e.Error, "needs "+r.Permission.String()) {
				t.Errorf("%s: error %q does not name %v", r.Pattern, e.Error, r.Permission)
			}
		}
		if checked < 25 {
			t.Errorf("only %d guarded routes checked", checked)
		}
		if after := storeState(t, srv); !slices.Equal(before, after) {
			t.Errorf("refused requests changed the store:\nbefore %q\nafter  %q", before, after)
		}
	}
}

func waitHealthy(t *testing.T, base string) {
	t.Helper()
	eventually(t, 30*time.Second, "a healthy server", func() bool {
		resp, err := http.Get(base + "/v1/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// storeState lists every stored resource of every type as id@version.
func storeState(t *testing.T, srv *server.Server) []string {
	t.Helper()
	var out []string
	for _, reg := range srv.Registry().Types() {
		ten := &pbresource.Tenancy{Namespace: "*"}
		if reg.Scope == resource.ScopeCluster {
			ten = &pbresource.Tenancy{}
		}
		// FromOperations: sealed types (the CA's signing keys) are listed
		// only by their own code.
		list, err := srv.API().List(resource.FromOperations(context.Background()), &pbresource.ListRequest{Type: reg.Type, Tenancy: ten})
		if err != nil {
			t.Fatal(err)
		}
		for _, res := range list.GetResources() {
			out = append(out, fmt.Sprintf("%s/%s/%s@%s", res.GetId().GetType().GetKind(), res.GetId().GetTenancy().GetNamespace(), res.GetId().GetName(), res.GetVersion()))
		}
	}
	slices.Sort(out)
	return out
}
