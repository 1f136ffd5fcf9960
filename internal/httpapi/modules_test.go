package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/acl"
	"trellis.dev/trellis/internal/httpapi"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage/inmem"
)

// echoRoutes are a module's routes: POST /v1/echo reads a text and a
// Status message (as protojson) and answers them, with the namespace.
func echoRoutes() []httpapi.Route {
	echo := func(w http.ResponseWriter, r *http.Request) error {
		p, err := httpapi.Params(r, "namespace")
		if err != nil {
			return err
		}
		var body struct {
			Text   string          `json:"text"`
			Status json.RawMessage `json:"status"`
		}
		if err := httpapi.DecodeJSON(r, &body); err != nil {
			return err
		}
		if body.Text == "" {
			return httpapi.InputError("text", "required")
		}
		st := &pbresource.Status{}
		if len(body.Status) > 0 {
			if err := httpapi.UnmarshalProto(body.Status, st, "status"); err != nil {
				return err
			}
		}
		httpapi.WriteJSON(w, http.StatusOK, map[string]any{
			"text": body.Text, "namespace": p["namespace"], "status": httpapi.ProtoJSON(st),
		})
		return nil
	}
	return []httpapi.Route{
		{Pattern: "POST /v1/echo", Permission: acl.NamespaceWrite, Handler: echo},
		{Pattern: "/v1/echo", Permission: acl.Public, Handler: httpapi.MethodNotAllowed("POST")},
	}
}

// A module's routes are served with the layers of the API's own: the
// permission check, the body limit, and the same refusals of bad input,
// naming the field.
func TestModuleRoutesServedLikeTheAPIsOwn(t *testing.T) {
	authorize := func(ctx context.Context) (acl.Authorizer, error) {
		if resource.TokenFromContext(ctx) == "nope" {
			return acl.DenyAll{}, nil
		}
		return acl.AllowAll{}, nil
	}
	e := newEnv(t, options{routes: echoRoutes(), maxBody: 256, authorize: authorize})

	r := e.do(http.MethodPost, "/v1/echo?namespace=team-a", `{"text":"hi","status":{"observed_generation":"7"}}`)
	mustStatus(t, r, http.StatusOK)
	if !strings.Contains(string(r.body), `"namespace":"team-a"`) || !strings.Contains(string(r.body), `"observed_generation":"7"`) ||
		!strings.Contains(string(r.body), `"conditions":[]`) {
		t.Errorf("echo answered %s", r.body)
	}

	for _, tt := range []struct {
		name, path, body string
		header           []string
		status           int
		code, want       string
	}{
		{"unknown field", "/v1/echo", `{"text":"hi","txt":"x"}`, nil, 400, "invalid_argument", `body: unknown field "txt"`},
		{"own refusal", "/v1/echo", `{}`, nil, 400, "invalid_argument", "text: required"},
		{"bad message", "/v1/echo", `{"text":"hi","status":{"observed_generation":true}}`, nil, 400, "invalid_argument", "status: "},
		{"unknown parameter", "/v1/echo?namespce=a", `{"text":"hi"}`, nil, 400, "invalid_argument", `unknown parameter "namespce" (this path takes: namespace)`},
		{"over the limit", "/v1/echo", `{"text":"` + strings.Repeat("x", 300) + `"}`, nil, 413, "too_large", "over the limit of 256 bytes"},
		{"refused", "/v1/echo?namespace=team-a", `{"text":"hi"}`, []string{"X-Trellis-Token", "nope"}, 403, "permission_denied", "needs namespace:write"},
	} {
		r := e.do(http.MethodPost, tt.path, tt.body, tt.header...)
		if r.status != tt.status {
			t.Errorf("%s: status %d, want %d: %s", tt.name, r.status, tt.status, r.body)
			continue
		}
		if got := r.apiError(t); got.Code != tt.code || !strings.Contains(got.Error, tt.want) {
			t.Errorf("%s: %+v, want code %s naming %q", tt.name, got, tt.code, tt.want)
		}
	}
	r = e.do(http.MethodGet, "/v1/echo", "")
	mustStatus(t, r, http.StatusMethodNotAllowed)
	if r.header.Get("Allow") != "POST" {
		t.Errorf("405 without Allow: POST: %v", r.header)
	}

	// Listed with their permissions, after the API's own and before its
	// catch-all.
	routes := e.handler.Routes()
	var at []int
	for i, r := range routes {
		if strings.HasSuffix(r.Pattern, "/v1/echo") {
			at = append(at, i)
			if r.Handler != nil {
				t.Errorf("%s: the table shares its handler", r.Pattern)
			}
		}
	}
	if len(at) != 2 || routes[at[0]].Permission != acl.NamespaceWrite || routes[len(routes)-1].Pattern != "/" {
		t.Errorf("routes: %+v", routes)
	}
}

// New refuses a route that declares no permission, has no handler or
// conflicts with a route already served, instead of serving it open or
// panicking.
func TestNewRefusesABadModuleRoute(t *testing.T) {
	ok := func(http.ResponseWriter, *http.Request) error { return nil }
	for _, tt := range []struct {
		route httpapi.Route
		want  string
	}{
		{httpapi.Route{Pattern: "GET /v1/things", Handler: ok}, `route "GET /v1/things" declares no permission`},
		{httpapi.Route{Pattern: "GET /v1/things", Permission: acl.NamespaceRead}, `route "GET /v1/things" has no handler`},
		{httpapi.Route{Pattern: "GET /v1/health", Permission: acl.Public, Handler: ok}, `route "GET /v1/health": `},
	} {
		reg := resource.NewRegistry()
		promReg := prometheus.NewRegistry()
		_, err := httpapi.New(httpapi.Config{
			API: resource.NewService(resource.Config{Backend: inmem.NewBackend(), Registry: reg}), Registry: reg,
			Cluster: &cluster{}, Registerer: promReg, Gatherer: promReg,
			Routes: []httpapi.Route{tt.route},
		})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New with %s: %v, want an error naming %q", tt.route.Pattern, err, tt.want)
		}
	}
}

// A module's route that holds a request open ends it when the server
// begins to shut down (Handler.Shutdown), through httpapi.Stopping, as the
// API's own watches do.
func TestModuleRouteSeesShutdown(t *testing.T) {
	entered := make(chan struct{})
	hold := func(w http.ResponseWriter, r *http.Request) error {
		close(entered)
		<-httpapi.Stopping(r.Context()).Done()
		httpapi.WriteJSON(w, http.StatusOK, map[string]string{"ended": "shutdown"})
		return nil
	}
	e := newEnv(t, options{routes: []httpapi.Route{{Pattern: "GET /v1/hold", Permission: acl.Public, Handler: hold}}})
	answer := make(chan string, 1)
	go func() {
		resp, err := http.Get(e.url + "/v1/hold")
		if err != nil {
			answer <- err.Error()
			return
		}
		defer resp.Body.Close()
		var body map[string]string
		_ = json.NewDecoder(resp.Body).Decode(&body)
		answer <- resp.Status + " " + body["ended"]
	}()
	<-entered
	e.handler.Shutdown()
	if got := <-answer; got != "200 OK shutdown" {
		t.Errorf("the held request = %q, want it answered at the shutdown", got)
	}
	if ctx := httpapi.Stopping(context.Background()); ctx.Done() != nil {
		t.Error("Stopping outside a request is a context that can end")
	}
}
