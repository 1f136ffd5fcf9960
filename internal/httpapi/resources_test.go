package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"trellis.dev/trellis/internal/acl"

	"google.golang.org/protobuf/types/known/anypb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/resource"
)

const nsPath = "/v1/resources/core/v1/Namespace/"

func TestWriteReadDelete(t *testing.T) {
	e := newEnv(t, options{})

	r := e.do(http.MethodPut, nsPath+"payments", `{"data":{"description":"the payments team"},"metadata":{"team":"payments"}}`)
	mustStatus(t, r, http.StatusOK)
	// The exact shape of a resource: the contract outside checks read.
	var shape map[string]json.RawMessage
	r.json(t, &shape)
	for _, k := range []string{"id", "version", "generation", "metadata", "data", "status"} {
		if _, ok := shape[k]; !ok {
			t.Errorf("response lacks %q: %s", k, r.body)
		}
	}
	if string(shape["data"]) != `{"description":"the payments team"}` {
		t.Errorf("data is %s, want the plain message", shape["data"])
	}
	if string(shape["generation"]) != `"1"` {
		t.Errorf("generation is %s, want \"1\"", shape["generation"])
	}
	var created wire.Resource
	r.json(t, &created)
	want := wire.ID{UID: created.ID.UID, Name: "payments", Type: wire.Type{Group: "core", GroupVersion: "v1", Kind: "Namespace"}}
	if created.ID != want || created.ID.UID == "" || created.Version == "" || created.Metadata["team"] != "payments" {
		t.Fatalf("created %+v", created)
	}

	for _, q := range []string{"", "?consistent=1", "?consistent=true"} {
		r = e.do(http.MethodGet, nsPath+"payments"+q, "")
		mustStatus(t, r, http.StatusOK)
		var got wire.Resource
		r.json(t, &got)
		if got.Version != created.Version || string(got.Data) != string(created.Data) {
			t.Fatalf("read%s %+v, want %+v", q, got, created)
		}
	}

	// CAS with the current version works, the old one then conflicts.
	r = e.do(http.MethodPut, nsPath+"payments", fmt.Sprintf(`{"version":%q,"data":{"description":"v2"}}`, created.Version))
	mustStatus(t, r, http.StatusOK)
	var updated wire.Resource
	r.json(t, &updated)
	if updated.Generation != "2" || updated.ID.UID != created.ID.UID {
		t.Fatalf("updated %+v", updated)
	}
	r = e.do(http.MethodPut, nsPath+"payments", fmt.Sprintf(`{"version":%q,"data":{"description":"v3"}}`, created.Version))
	mustStatus(t, r, http.StatusConflict)
	if er := r.apiError(t); er.Code != wire.CodeConflict || !strings.Contains(er.Error, "version") {
		t.Fatalf("stale write: %+v", er)
	}

	// A stale CAS delete conflicts; a delete is idempotent.
	r = e.do(http.MethodDelete, nsPath+"payments?version="+created.Version, "")
	mustStatus(t, r, http.StatusConflict)
	mustStatus(t, e.do(http.MethodDelete, nsPath+"payments?version="+updated.Version, ""), http.StatusOK)
	mustStatus(t, e.do(http.MethodDelete, nsPath+"payments", ""), http.StatusOK)

	r = e.do(http.MethodGet, nsPath+"payments", "")
	mustStatus(t, r, http.StatusNotFound)
	if er := r.apiError(t); er.Code != wire.CodeNotFound {
		t.Fatalf("read after delete: %+v", er)
	}
}

// A fetched resource can be put back as it is (its read-only fields are
// ignored), but not under another name.
func TestPutBackFetchedResource(t *testing.T) {
	e := newEnv(t, options{})
	mustStatus(t, e.do(http.MethodPut, nsPath+"a", `{"data":{"description":"one"}}`), http.StatusOK)
	fetched := e.do(http.MethodGet, nsPath+"a", "")
	edited := strings.Replace(string(fetched.body), `"one"`, `"two"`, 1)
	r := e.do(http.MethodPut, nsPath+"a", edited)
	mustStatus(t, r, http.StatusOK)
	var got wire.Resource
	r.json(t, &got)
	if string(got.Data) != `{"description":"two"}` {
		t.Fatalf("data %s", got.Data)
	}
	r = e.do(http.MethodPut, nsPath+"b", edited)
	mustStatus(t, r, http.StatusBadRequest)
	if er := r.apiError(t); !strings.HasPrefix(er.Error, "id.name:") {
		t.Fatalf("mismatched id: %+v", er)
	}
}

func TestNamespacedTypes(t *testing.T) {
	e := newEnv(t, options{})
	const probes = "/v1/resources/test/v1/Probe"

	// No namespace means "default".
	mustStatus(t, e.do(http.MethodPut, probes+"/p1", `{"data":{"observed_generation":"3"}}`), http.StatusOK)
	r := e.do(http.MethodGet, probes+"/p1?namespace=default", "")
	mustStatus(t, r, http.StatusOK)
	var p wire.Resource
	r.json(t, &p)
	if p.ID.Tenancy.Namespace != "default" || string(p.Data) != `{"observed_generation":"3"}` {
		t.Fatalf("probe %+v data %s", p, p.Data)
	}

	// A namespace that does not exist is refused by the service.
	r = e.do(http.MethodPut, probes+"/p1?namespace=prod", `{}`)
	mustStatus(t, r, http.StatusConflict)
	if er := r.apiError(t); er.Code != wire.CodeFailedPrecondition {
		t.Fatalf("missing namespace: %+v", er)
	}
	mustStatus(t, e.do(http.MethodPut, nsPath+"prod", `{}`), http.StatusOK)
	mustStatus(t, e.do(http.MethodPut, probes+"/p1?namespace=prod", `{}`), http.StatusOK)
	mustStatus(t, e.do(http.MethodPut, probes+"/p2?namespace=prod", `{}`), http.StatusOK)
	mustStatus(t, e.do(http.MethodPut, probes+"/q1?namespace=prod", `{}`), http.StatusOK)

	for _, tc := range []struct {
		query string
		want  []string // namespace/name
	}{
		{"", []string{"default/p1"}},
		{"?namespace=prod", []string{"prod/p1", "prod/p2", "prod/q1"}},
		{"?namespace=*", []string{"default/p1", "prod/p1", "prod/p2", "prod/q1"}},
		{"?namespace=*&prefix=p", []string{"default/p1", "prod/p1", "prod/p2"}},
		{"?namespace=prod&prefix=q&consistent=1", []string{"prod/q1"}},
		{"?namespace=prod&prefix=zzz", []string{}},
	} {
		r := e.do(http.MethodGet, probes+tc.query, "")
		mustStatus(t, r, http.StatusOK)
		if !strings.Contains(string(r.body), `"resources":[`) {
			t.Fatalf("list%s: %s is not {\"resources\":[...]}", tc.query, r.body)
		}
		var list wire.ListResponse
		r.json(t, &list)
		got := []string{}
		for _, res := range list.Resources {
			got = append(got, res.ID.Tenancy.Namespace+"/"+res.ID.Name)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("list%s = %v, want %v", tc.query, got, tc.want)
		}
	}
}

// Every refusal of bad input is a 400 whose message names the field.
func TestBadInput(t *testing.T) {
	e := newEnv(t, options{})
	const probe = "/v1/resources/test/v1/Probe/p"
	for _, tc := range []struct {
		name, method, path, body string
		wantPrefix               string // the message starts with the field
		wantIn                   string
	}{
		{"malformed JSON", "PUT", nsPath + "a", `{"data":`, "body:", "malformed"},
		{"not JSON", "PUT", nsPath + "a", `hello`, "body:", "malformed JSON"},
		{"empty body", "PUT", nsPath + "a", ``, "body:", "empty"},
		{"trailing data", "PUT", nsPath + "a", `{} {}`, "body:", "after the JSON object"},
		{"unknown envelope field", "PUT", nsPath + "a", `{"dta":{}}`, "body:", `"dta"`},
		{"metadata not a map", "PUT", nsPath + "a", `{"metadata":["x"]}`, "metadata:", "object"},
		{"unknown type", "PUT", "/v1/resources/core/v1/Nope/a", `{}`, "type:", "core/v1/Nope"},
		{"unknown type lists known", "GET", "/v1/resources/core/v2/Namespace", ``, "type:", "core/v1/Namespace"},
		{"bad name", "PUT", nsPath + "Not_A_Label", `{}`, "id.name:", "DNS label"},
		{"name too long", "PUT", nsPath + strings.Repeat("a", 64), `{}`, "id.name:", ""},
		{"unknown data field", "PUT", nsPath + "a", `{"data":{"descripton":"x"}}`, "data:", `"descripton"`},
		{"unknown data field lists known", "PUT", nsPath + "a", `{"data":{"x":1}}`, "data:", "description"},
		{"data of the wrong type", "PUT", nsPath + "a", `{"data":{"description":5}}`, "data:", "description"},
		{"data not an object", "PUT", nsPath + "a", `{"data":"hello"}`, "data:", "object"},
		{"an Any is not plain data", "PUT", nsPath + "a", `{"data":{"@type":"type.googleapis.com/trellis.core.v1.Namespace"}}`, "data:", `"@type"`},
		{"nested unknown field", "PUT", probe, `{"data":{"conditions":[{"type":"ok"},{"resource":{"nmae":"x"}}]}}`, "data.conditions[1].resource:", `"nmae"`},
		{"nested wrong enum", "PUT", probe, `{"data":{"conditions":[{"state":"MAYBE"}]}}`, "data:", "MAYBE"},
		{"namespace on a cluster-scoped type", "PUT", nsPath + "a?namespace=prod", `{}`, "namespace:", "cluster-scoped"},
		{"wildcard namespace on a write", "PUT", probe + "?namespace=*", `{}`, "namespace:", "only for lists"},
		{"bad namespace name", "PUT", probe + "?namespace=Prod_1", `{}`, "id.tenancy.namespace:", ""},
		{"unknown query parameter", "GET", "/v1/resources/test/v1/Probe?namespce=prod", ``, "query:", `"namespce"`},
		{"parameter given twice", "GET", "/v1/resources/test/v1/Probe?prefix=a&prefix=b", ``, "prefix:", "once"},
		{"bad consistent", "GET", nsPath + "a?consistent=maybe", ``, "consistent:", "maybe"},
		{"bad index", "GET", "/v1/resources/core/v1/Namespace?watch=1&index=-3", ``, "index:", "-3"},
		{"index without watch", "GET", "/v1/resources/core/v1/Namespace?index=3", ``, "index:", "watch"},
		{"owner without uid", "PUT", nsPath + "a", `{"owner":{"name":"x","type":{"group":"core","group_version":"v1","kind":"Namespace"}}}`, "owner", ""},
		{"bad metadata key", "PUT", nsPath + "a", `{"metadata":{"bad key!":"x"}}`, "metadata", ""},
		{"empty batch", "PUT", "/v1/batch", `{"resources":[]}`, "resources:", "empty"},
		{"batch member without type", "PUT", "/v1/batch", `{"resources":[{"name":"a"}]}`, "resources[0].type:", ""},
		{"batch member bad data", "PUT", "/v1/batch", `{"resources":[{"type":"core/v1/Namespace","name":"a"},{"type":"core/v1/Namespace","name":"b","data":{"nope":1}}]}`, "resources[1].data:", `"nope"`},
		{"batch member bad name", "PUT", "/v1/batch", `{"resources":[{"type":"core/v1/Namespace","name":"B!"}]}`, "resources[0].id.name:", ""},
		{"batch compare bad op", "PUT", "/v1/batch", `{"resources":[{"type":"core/v1/Namespace","name":"a"}],"compares":[{"op":"same","type":"core/v1/Namespace","name":"b"}]}`, "compares[0].op:", `"same"`},
		{"batch compare bad type", "PUT", "/v1/batch", `{"resources":[{"type":"core/v1/Namespace","name":"a"}],"compares":[{"op":"absent","type":"core/Namespace","name":"b"}]}`, "compares[0].type:", ""},
		{"batch compare without version", "PUT", "/v1/batch", `{"resources":[{"type":"core/v1/Namespace","name":"a"}],"compares":[{"op":"version","type":"core/v1/Namespace","name":"b"}]}`, "compares[0].version:", "required"},
		// A lone surrogate escape: named with its offset, not "unexpected
		// EOF" from deep in the data's decoder, nor silently replaced.
		{"lone high surrogate in data", "PUT", nsPath + "a", `{"data":{"description":"\ud800"}}`, "body:",
			`invalid JSON escape at byte 25: \ud800 is an unpaired UTF-16 surrogate: a high surrogate must be followed by a low one (\udc00-\udfff)`},
		{"high surrogate before a plain escape", "PUT", nsPath + "a", `{"data":{"description":"x\uD800\u0041"}}`, "body:", `at byte 26: \uD800 is an unpaired UTF-16 surrogate`},
		{"lone low surrogate in metadata", "PUT", nsPath + "a", `{"metadata":{"a":"\udc00"}}`, "body:",
			`invalid JSON escape at byte 19: \udc00 is an unpaired UTF-16 surrogate: a low surrogate must follow a high one (\ud800-\udbff)`},
		{"lone surrogate in a batch", "PUT", "/v1/batch", `{"resources":[{"type":"core/v1/Namespace","name":"a","data":{"description":"\ud83d"}}]}`, "body:", `\ud83d is an unpaired`},
		// A malformed version can never match: a 400 naming it, not a 409
		// that says to retry.
		{"malformed version on delete", "DELETE", nsPath + "a?version=abc", ``, "version:", `"abc" is not a resource version`},
		{"negative version on delete", "DELETE", nsPath + "a?version=-1", ``, "version:", `"-1" is not a resource version`},
		{"malformed version on a write", "PUT", nsPath + "a", `{"version":"v2"}`, "version:", `"v2" is not a resource version`},
		{"malformed version in a batch", "PUT", "/v1/batch", `{"resources":[{"type":"core/v1/Namespace","name":"a"},{"type":"core/v1/Namespace","name":"b","version":"x"}]}`,
			"resources[1].version:", `"x" is not a resource version`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(tc.method, tc.path, tc.body)
			mustStatus(t, r, http.StatusBadRequest)
			er := r.apiError(t)
			if er.Code != wire.CodeInvalidArgument || !strings.HasPrefix(er.Error, tc.wantPrefix) || !strings.Contains(er.Error, tc.wantIn) {
				t.Fatalf("error %+v, want code %s, prefix %q, containing %q", er, wire.CodeInvalidArgument, tc.wantPrefix, tc.wantIn)
			}
		})
	}
	// Nothing of it was written.
	r := e.do(http.MethodGet, "/v1/resources/core/v1/Namespace", "")
	var list wire.ListResponse
	r.json(t, &list)
	if len(list.Resources) != 1 || list.Resources[0].ID.Name != "default" {
		t.Fatalf("refused requests wrote: %s", r.body)
	}
}

func TestTooLarge(t *testing.T) {
	e := newEnv(t, options{})
	// Over the HTTP limit: cut before decoding.
	huge := `{"data":{"description":"` + strings.Repeat("x", 2<<20) + `"}}`
	r := e.do(http.MethodPut, nsPath+"a", huge)
	mustStatus(t, r, http.StatusRequestEntityTooLarge)
	if er := r.apiError(t); er.Code != wire.CodeTooLarge || !strings.HasPrefix(er.Error, "body:") {
		t.Fatalf("huge body: %+v", er)
	}
	// Under the HTTP limit but over the service's 1 MiB per resource.
	const probe = "/v1/resources/test/v1/Probe/p"
	big := `{"data":{"conditions":[{"message":"` + strings.Repeat("x", 1<<20+100) + `"}]}}`
	r = e.do(http.MethodPut, probe, big)
	mustStatus(t, r, http.StatusRequestEntityTooLarge)
	if er := r.apiError(t); er.Code != wire.CodeTooLarge {
		t.Fatalf("big resource: %+v", er)
	}
	mustStatus(t, e.do(http.MethodGet, nsPath+"a", ""), http.StatusNotFound)
	mustStatus(t, e.do(http.MethodGet, probe, ""), http.StatusNotFound)
}

func TestNoLeader(t *testing.T) {
	e := newEnv(t, options{})
	e.backend.on = true
	r := e.do(http.MethodPut, nsPath+"a", `{}`)
	mustStatus(t, r, http.StatusServiceUnavailable)
	if er := r.apiError(t); er.Code != wire.CodeUnavailable || !strings.Contains(er.Error, "retry") {
		t.Fatalf("write without leader: %+v", er)
	}
	mustStatus(t, e.do(http.MethodGet, nsPath+"default?consistent=1", ""), http.StatusServiceUnavailable)
	// An eventual read is served from the local copy.
	mustStatus(t, e.do(http.MethodGet, nsPath+"default", ""), http.StatusOK)
}

func TestTokenAndPermissionDenied(t *testing.T) {
	authorize := func(ctx context.Context) (acl.Authorizer, error) {
		if resource.TokenFromContext(ctx) == "ops" {
			return acl.AllowAll{}, nil
		}
		return acl.DenyAll{}, nil
	}
	e := newEnv(t, options{authorize: authorize})
	r := e.do(http.MethodPut, nsPath+"a", `{}`)
	mustStatus(t, r, http.StatusForbidden)
	if er := r.apiError(t); er.Code != wire.CodePermissionDenied {
		t.Fatalf("no token: %+v", er)
	}
	mustStatus(t, e.do(http.MethodPut, nsPath+"a", `{}`, "X-Trellis-Token", "nope"), http.StatusForbidden)
	mustStatus(t, e.do(http.MethodPut, nsPath+"a", `{}`, "X-Trellis-Token", "ops"), http.StatusOK)
	mustStatus(t, e.do(http.MethodGet, nsPath+"a", ``, "Authorization", "Bearer ops"), http.StatusOK)
	mustStatus(t, e.do(http.MethodGet, nsPath+"a", ``, "Authorization", "Bearer nope"), http.StatusForbidden)
}

func TestBatch(t *testing.T) {
	e := newEnv(t, options{})
	r := e.do(http.MethodPut, "/v1/batch", `{"resources":[
		{"type":"core/v1/Namespace","name":"prod","data":{"description":"production"}},
		{"type":"test/v1/Probe","name":"p","namespace":"default","metadata":{"a":"b"}}]}`)
	mustStatus(t, r, http.StatusOK)
	var out wire.ListResponse
	r.json(t, &out)
	if len(out.Resources) != 2 || out.Resources[0].ID.Name != "prod" || out.Resources[1].ID.Tenancy.Namespace != "default" ||
		out.Resources[0].Version != out.Resources[1].Version {
		t.Fatalf("batch wrote %s", r.body)
	}

	// A stale member fails the whole batch: nothing of it is written.
	r = e.do(http.MethodPut, "/v1/batch", `{"resources":[
		{"type":"core/v1/Namespace","name":"staging"},
		{"type":"core/v1/Namespace","name":"prod","version":"1"}]}`)
	mustStatus(t, r, http.StatusConflict)
	if er := r.apiError(t); er.Code != wire.CodeConflict {
		t.Fatalf("stale batch: %+v", er)
	}
	mustStatus(t, e.do(http.MethodGet, nsPath+"staging", ""), http.StatusNotFound)

	// Compares: written only while prod is at the version read and no
	// namespace is called staging; a failed one is a conflict naming it.
	prod := out.Resources[0].Version
	r = e.do(http.MethodPut, "/v1/batch", `{"resources":[{"type":"test/v1/Probe","name":"q"}],"compares":[
		{"op":"version","type":"core/v1/Namespace","name":"prod","version":"`+prod+`"},
		{"op":"absent","type":"core/v1/Namespace","name":"staging"},
		{"op":"nothing_newer","type":"core/v1/Namespace","version":"`+prod+`"}]}`)
	mustStatus(t, r, http.StatusOK)
	r = e.do(http.MethodPut, "/v1/batch", `{"resources":[{"type":"test/v1/Probe","name":"s"}],"compares":[
		{"op":"exists","type":"core/v1/Namespace","name":"prod"},
		{"op":"exists","type":"core/v1/Namespace","name":"staging"}]}`)
	mustStatus(t, r, http.StatusConflict)
	if er := r.apiError(t); er.Code != wire.CodeConflict || !strings.HasPrefix(er.Error, "compares[1]: conflict") {
		t.Fatalf("failed compare: %+v", er)
	}
	mustStatus(t, e.do(http.MethodGet, "/v1/resources/test/v1/Probe/s", ""), http.StatusNotFound)

	// An owner and what it owns, in one batch: the owned names the owner
	// without its uid.
	r = e.do(http.MethodPut, "/v1/batch", `{"resources":[
		{"type":"test/v1/Probe","name":"child","owner":{"name":"parent","type":{"group":"test","group_version":"v1","kind":"Probe"},"tenancy":{"namespace":"default"}}},
		{"type":"test/v1/Probe","name":"parent"}]}`)
	mustStatus(t, r, http.StatusOK)
	r.json(t, &out)
	if out.Resources[0].Owner == nil || out.Resources[0].Owner.UID == "" || out.Resources[0].Owner.UID != out.Resources[1].ID.UID {
		t.Fatalf("owner and owned in one batch: %s", r.body)
	}
}

func TestRouting(t *testing.T) {
	e := newEnv(t, options{})
	for _, tc := range []struct {
		method, path string
		status       int
		code, allow  string
	}{
		{"POST", nsPath + "a", http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed, "GET, PUT, DELETE"},
		{"DELETE", "/v1/resources/core/v1/Namespace", http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed, "GET"},
		{"GET", "/v1/batch", http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed, "PUT"},
		{"GET", "/v1/nothing", http.StatusNotFound, wire.CodeNotFound, ""},
		{"GET", "/v1/resources/core/v1", http.StatusNotFound, wire.CodeNotFound, ""},
	} {
		r := e.do(tc.method, tc.path, "")
		mustStatus(t, r, tc.status)
		if er := r.apiError(t); er.Code != tc.code || r.header.Get("Allow") != tc.allow {
			t.Errorf("%s %s: %+v, Allow %q", tc.method, tc.path, er, r.header.Get("Allow"))
		}
	}
}

// A panic in a handler (here in a type's Validate hook, called by the real
// service) is a 500 and the server keeps serving.
func TestPanicIsInternalError(t *testing.T) {
	e := newEnv(t, options{})
	r := e.do(http.MethodPut, "/v1/resources/test/v1/Panic/x", `{}`)
	mustStatus(t, r, http.StatusInternalServerError)
	if er := r.apiError(t); er.Code != wire.CodeInternal {
		t.Fatalf("panic: %+v", er)
	}
	mustStatus(t, e.do(http.MethodGet, nsPath+"default", ""), http.StatusOK)
}

// A route's own permission is checked before its handler runs: 401 when
// the resolver wants a token and none came, 403 naming the permission when
// the token may not, the answer when it may.
func TestRoutePermission(t *testing.T) {
	authorize := func(ctx context.Context) (acl.Authorizer, error) {
		switch resource.TokenFromContext(ctx) {
		case "":
			return nil, acl.ErrTokenRequired
		case "ops":
			return acl.AllowAll{}, nil
		}
		return acl.DenyAll{}, nil
	}
	e := newEnv(t, options{authorize: authorize})
	r := e.do(http.MethodGet, "/v1/metrics", "")
	mustStatus(t, r, http.StatusUnauthorized)
	if er := r.apiError(t); er.Code != wire.CodeUnauthenticated || !strings.Contains(er.Error, "token is required") {
		t.Fatalf("no token: %+v", er)
	}
	r = e.do(http.MethodGet, "/v1/metrics", "", "X-Trellis-Token", "nope")
	mustStatus(t, r, http.StatusForbidden)
	if er := r.apiError(t); er.Code != wire.CodePermissionDenied || !strings.Contains(er.Error, "needs operator:read") {
		t.Fatalf("refused token: %+v", er)
	}
	mustStatus(t, e.do(http.MethodGet, "/v1/metrics", "", "Authorization", "Bearer ops"), http.StatusOK)
	// Public routes ask nothing.
	mustStatus(t, e.do(http.MethodGet, "/v1/health", ""), http.StatusOK)
	// Without an operator (in memory) the operator routes are still
	// guarded first: a refused caller learns nothing about the server.
	mustStatus(t, e.do(http.MethodPut, "/v1/snapshot", "x", "X-Trellis-Token", "nope"), http.StatusForbidden)
	mustStatus(t, e.do(http.MethodPut, "/v1/snapshot", "x", "X-Trellis-Token", "ops"), http.StatusNotImplemented)
}

// TestStatusPayloadShowsItsType: a status entry's typed payload is shown
// with its "@type", beside observed_generation and conditions.
func TestStatusPayloadShowsItsType(t *testing.T) {
	e := newEnv(t, options{})
	mustStatus(t, e.do(http.MethodPut, "/v1/resources/test/v1/Probe/p1", `{"data":{}}`), http.StatusOK)
	payload, err := anypb.New(&pbresource.Condition{Type: "Reachable", State: pbresource.State_STATE_TRUE})
	if err != nil {
		t.Fatal(err)
	}
	id := &pbresource.ID{Type: probeType, Name: "p1"}
	if _, err := e.api.WriteStatus(resource.AsController(context.Background(), "prober"), &pbresource.WriteStatusRequest{Id: id, Key: "prober", Status: &pbresource.Status{ObservedGeneration: 1, Data: payload}}); err != nil {
		t.Fatal(err)
	}
	r := e.do(http.MethodGet, "/v1/resources/test/v1/Probe/p1", "")
	mustStatus(t, r, http.StatusOK)
	var got wire.Resource
	r.json(t, &got)
	want := `{"observed_generation":"1","data":{"@type":"type.googleapis.com/trellis.resource.v1.Condition","type":"Reachable","state":"STATE_TRUE"}}`
	var a, b any
	if err := json.Unmarshal(got.Status["prober"], &a); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal([]byte(want), &b)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("status %s, want %s", got.Status["prober"], want)
	}
}
