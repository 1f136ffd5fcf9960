package schedulermodule_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"trellis.dev/trellis/internal/acl"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/httpapi"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/module"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/scheduler/schedulermodule"
	"trellis.dev/trellis/internal/scheduler/schedulertest"
)

// oneServer is the ClusterStatus of a lone server.
type oneServer struct{}

func (oneServer) Leader() string           { return "127.0.0.1:7702" }
func (oneServer) Peers() ([]string, error) { return []string{"127.0.0.1:7702"}, nil }
func (oneServer) Health() wire.Health      { return wire.Health{Status: "ok"} }

// registry has the types of the scheduler's module and those it needs.
func registry() *resource.Registry {
	reg := resource.NewRegistry()
	for _, m := range []module.Module{core.Module(), orchestratorTypes{}, schedulermodule.New()} {
		m.Register(reg)
	}
	return reg
}

// orchestratorTypes stands for the orchestrator's module, whose types the
// scheduler needs (its parts need a server's leadership).
type orchestratorTypes struct{}

func (orchestratorTypes) Name() string                            { return "orchestrator" }
func (orchestratorTypes) Register(r *resource.Registry)           { orchestrator.Register(r) }
func (orchestratorTypes) Setup(module.Deps) (module.Parts, error) { return module.Parts{}, nil }

// api serves the scheduler's routes, through the HTTP API's router, over
// the harness's store.
type api struct {
	t   *testing.T
	h   *schedulertest.Harness
	url string
}

func newAPI(t *testing.T, maxBody int64) *api {
	h := schedulertest.New(t)
	reg := registry()
	parts, err := schedulermodule.New().Setup(module.Deps{API: h.API, Registry: reg, Cache: h.Cache, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := parts.Check(); err != nil {
		t.Fatal(err)
	}
	if len(parts.Controllers) != 1 || len(parts.Routes) == 0 {
		t.Fatalf("parts: %d controllers, %d routes", len(parts.Controllers), len(parts.Routes))
	}
	promReg := prometheus.NewRegistry()
	handler, err := httpapi.New(httpapi.Config{API: h.API, Registry: reg, Cluster: oneServer{},
		Registerer: promReg, Gatherer: promReg, MaxRequestBytes: maxBody, Routes: parts.Routes})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(handler)
	t.Cleanup(func() {
		handler.Shutdown()
		srv.Close()
	})
	return &api{t: t, h: h, url: srv.URL}
}

// do sends a request and decodes the JSON answer into a map.
func (a *api) do(method, path, body string) (int, http.Header, map[string]any) {
	a.t.Helper()
	req, err := http.NewRequest(method, a.url+path, strings.NewReader(body))
	if err != nil {
		a.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		a.t.Fatalf("%s %s: %d %q is not a JSON object", method, path, resp.StatusCode, b)
	}
	return resp.StatusCode, resp.Header, out
}

func (a *api) ok(method, path, body string) map[string]any {
	a.t.Helper()
	code, _, out := a.do(method, path, body)
	if code != http.StatusOK {
		a.t.Fatalf("%s %s: %d %v", method, path, code, out)
	}
	return out
}

// The operations over HTTP: an environment's life from its creation to a
// deployment stopped, and its deletion, in the JSON shapes
// docs/scheduler.md gives.
func TestRoutesServeTheOperations(t *testing.T) {
	a := newAPI(t, 0)
	td := a.h.TaskDefinition("ls", 1)
	spec := `{"name":"ls","task_definition":"` + td + `","instance_group":{"attributes":["role=logger"]},"deployment":{"min_healthy_percent":50}}`

	created := a.ok("POST", "/v1/environments", spec)
	env, _ := created["environment"].(map[string]any)
	if env["id"].(map[string]any)["name"] != "ls" || created["version"] == "" {
		t.Fatalf("create answered %v", created)
	}
	updated := a.ok("PUT", "/v1/environments/ls?namespace=default", spec)
	if updated["unchanged"] != true || updated["version"] != created["version"] {
		t.Errorf("an update to the same spec answered %v", updated)
	}
	got := a.ok("GET", "/v1/environments/ls", "")
	if got["environment"] == nil || got["state"] == nil {
		t.Errorf("get answered %v", got)
	}
	if list := a.ok("GET", "/v1/environments?type=daemon", "")["environments"].([]any); len(list) != 1 {
		t.Errorf("list answered %v", list)
	}
	if list := a.ok("GET", "/v1/environments/ls/versions", "")["versions"].([]any); len(list) != 1 {
		t.Errorf("versions answered %v", list)
	}
	if st := a.ok("GET", "/v1/environments/ls/status", ""); st["instances"] == nil {
		t.Errorf("status answered %v, want every field present", st)
	}
	a.ok("GET", "/v1/environments/ls/diff?version="+created["version"].(string), "")

	dep := a.ok("POST", "/v1/environments/ls/deployments", "")["deployment"].(map[string]any)
	id := dep["id"].(map[string]any)["name"].(string)
	if list := a.ok("GET", "/v1/environments/ls/deployments", "")["deployments"].([]any); len(list) != 1 {
		t.Errorf("deployments answered %v", list)
	}
	a.ok("GET", "/v1/environments/ls/deployments/"+id, "")
	a.ok("POST", "/v1/environments/ls/deployments/"+id+"/stop", "")
	// Deleting marks the environment; its controller tears it down.
	deleted := a.ok("DELETE", "/v1/environments/ls", "")["environment"].(map[string]any)
	if deleted["data"].(map[string]any)["deleting"] != true {
		t.Errorf("delete answered %v", deleted)
	}
}

// Bad requests are refused as the API's own are, naming the field.
func TestRoutesRefuseBadInput(t *testing.T) {
	a := newAPI(t, 512)
	for _, tt := range []struct {
		method, path, body string
		status             int
		want               string
	}{
		{"POST", "/v1/environments", `{"name":"ls","task_defnition":"ls:1"}`, 400, `body: unknown field "task_defnition"`},
		{"POST", "/v1/environments", `{"name":"ls","instance_group":{"atributes":[]}}`, 400, "instance_group: "},
		{"POST", "/v1/environments", `{"name":"ls","deployment":{"min_healthy_percent":"x"}}`, 400, "deployment: "},
		{"GET", "/v1/environments?namespce=a", "", 400, `unknown parameter "namespce" (this path takes: namespace, type)`},
		{"GET", "/v1/environments/ls/status?version=1", "", 400, `unknown parameter "version" (this path takes: namespace)`},
		{"POST", "/v1/environments", `{"name":"` + strings.Repeat("x", 600) + `"}`, 413, "over the limit of 512 bytes"},
		{"POST", "/v1/environments/ls/deployments", `{"version":1}`, 400, "version: expected a string"},
		{"GET", "/v1/environments/nope", "", 404, "nope"},
	} {
		code, _, out := a.do(tt.method, tt.path, tt.body)
		if msg, _ := out["error"].(string); code != tt.status || !strings.Contains(msg, tt.want) {
			t.Errorf("%s %s %s: %d %v, want %d naming %q", tt.method, tt.path, tt.body, code, out, tt.status, tt.want)
		}
	}
	code, header, _ := a.do("PATCH", "/v1/environments/ls", "")
	if code != http.StatusMethodNotAllowed || header.Get("Allow") != "GET, PUT, DELETE" {
		t.Errorf("PATCH: %d, Allow %q", code, header.Get("Allow"))
	}
}

// Every route declares the namespace permission its operation needs:
// reads need namespace:read, anything that writes namespace:write.
func TestRoutesDeclareNamespacePermissions(t *testing.T) {
	h := schedulertest.New(t)
	parts, err := schedulermodule.New().Setup(module.Deps{API: h.API, Registry: registry(), Cache: h.Cache, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, r := range parts.Routes {
		patterns = append(patterns, r.Pattern)
		method, _, ok := strings.Cut(r.Pattern, " ")
		want := acl.NamespaceWrite
		switch {
		case !ok:
			want = acl.Public // the path's 405
		case method == http.MethodGet:
			want = acl.NamespaceRead
		}
		if r.Permission != want {
			t.Errorf("%s declares %v, want %v", r.Pattern, r.Permission, want)
		}
	}
	if !slices.Contains(patterns, "POST /v1/environments/{name}/rollback") || len(patterns) != 16 {
		t.Errorf("routes: %q", patterns)
	}
}

// The scheduler places Tasks on Instances: without the orchestrator's
// types it refuses to set up, and says what is missing.
func TestSetupNeedsTheOrchestrator(t *testing.T) {
	reg := resource.NewRegistry()
	core.Register(reg)
	schedulermodule.New().Register(reg)
	_, err := schedulermodule.New().Setup(module.Deps{Registry: reg, Logger: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.Contains(err.Error(), "orchestrator") {
		t.Errorf("Setup without the orchestrator's types: %v", err)
	}
}
