package catalogmodule_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	consul "github.com/hashicorp/consul/api"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/acl"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/catalog/catalogmodule"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/httpapi"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/informer"
	"trellis.dev/trellis/internal/module"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage/inmem"
)

// consulHarness is a server's HTTP API with the catalog's module, over an
// in-memory store and the server's kind of informer, served on a real
// listener so that Consul's own client can read it.
type consulHarness struct {
	api     *resource.Service
	in      *informer.Informer
	handler http.Handler
	metrics *prometheus.Registry
	url     string
	client  *consul.Client
}

type oneServer struct{}

func (oneServer) Leader() string           { return "127.0.0.1:7702" }
func (oneServer) Peers() ([]string, error) { return []string{"127.0.0.1:7702"}, nil }
func (oneServer) Health() wire.Health      { return wire.Health{Status: "ok"} }

// tokens: "reader" may read namespace default only; "operator" may read
// everything; any other token, or none, may do nothing.
type tokenAuthorizer struct{ token string }

func (a tokenAuthorizer) OperatorRead() error {
	if a.token == "operator" {
		return nil
	}
	return acl.ErrPermissionDenied
}
func (tokenAuthorizer) OperatorWrite() error { return acl.ErrPermissionDenied }
func (a tokenAuthorizer) NamespaceRead(ns string) error {
	if a.token == "operator" || a.token == "reader" && ns == "default" {
		return nil
	}
	return acl.ErrPermissionDenied
}
func (a tokenAuthorizer) NamespaceWrite(ns string) error {
	if a.token == "operator" || a.token == "writer" && ns == "default" {
		return nil
	}
	return acl.ErrPermissionDenied
}
func (tokenAuthorizer) Agent() error  { return acl.ErrPermissionDenied }
func (tokenAuthorizer) Server() error { return acl.ErrPermissionDenied }

func newConsulHarness(t testing.TB) *consulHarness {
	t.Helper()
	reg := resource.NewRegistry()
	core.Register(reg)
	orchestrator.Register(reg)
	m := catalogmodule.New(catalogmodule.Config{})
	m.Register(reg)
	backend := inmem.NewBackend()
	api := resource.NewService(resource.Config{Backend: backend, Registry: reg})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := core.Bootstrap(ctx, api); err != nil {
		t.Fatal(err)
	}
	in, err := informer.New(informer.Config{Source: api, Local: true, LocalIndex: backend.Store().Index})
	if err != nil {
		t.Fatal(err)
	}
	metrics := prometheus.NewRegistry()
	parts, err := m.Setup(module.Deps{API: api, Registry: reg, Informer: in, Metrics: metrics, Cluster: module.Cluster{Datacenter: "dc1"}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = in.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	h, err := httpapi.New(httpapi.Config{API: api, Registry: reg, Cluster: oneServer{}, Routes: parts.Routes,
		Authorize: func(ctx context.Context) (acl.Authorizer, error) {
			return tokenAuthorizer{token: resource.TokenFromContext(ctx)}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	client, err := consul.NewClient(&consul.Config{Address: strings.TrimPrefix(srv.URL, "http://"), Token: "reader"})
	if err != nil {
		t.Fatal(err)
	}
	return &consulHarness{api: api, in: in, handler: h, metrics: metrics, url: srv.URL, client: client}
}

// register stores an instance from outside Trellis with one TTL check,
// "alive".
func (h *consulHarness) register(t testing.TB, ns, name, service, addr string, port uint32, tags ...string) {
	t.Helper()
	data, _ := anypb.New(&pbcatalog.ServiceInstance{Service: service, Address: addr, Port: port, Tags: tags,
		Meta:   map[string]string{"version": "16"},
		Checks: []*pbcatalog.CheckDefinition{{Name: "alive", Ttl: durationpb.New(time.Hour)}}})
	if _, err := h.api.Write(context.Background(), &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: catalog.ServiceInstanceID(ns, name), Data: data}}); err != nil {
		t.Fatal(err)
	}
}

// setCheck reports the "alive" check of instance name as the servers do,
// and returns the index it was written at.
func (h *consulHarness) setCheck(t testing.TB, ns, name, st string) uint64 {
	t.Helper()
	now := timestamppb.Now()
	payload, _ := anypb.New(&pbcatalog.ChecksStatus{Checks: []*pbcatalog.CheckStatus{{Name: "alive", Status: st, Output: "set by the test", ChangedAt: now, CheckedAt: now}},
		Health: catalog.Aggregate([]*pbcatalog.CheckStatus{{Status: st}}), ReportedAt: now})
	resp, err := h.api.WriteStatus(resource.AsController(context.Background(), catalog.HealthControllerName), &pbresource.WriteStatusRequest{
		Id: catalog.ServiceInstanceID(ns, name), Key: catalog.ServerChecksStatusKey, Status: &pbresource.Status{Data: payload}})
	if err != nil {
		t.Fatal(err)
	}
	return catalog.IndexOf(resp.GetResource())
}

// get answers a raw request with token.
func (h *consulHarness) get(t testing.TB, path, token string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", h.url+path, nil)
	if token != "" {
		req.Header.Set("X-Consul-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// Consul's own client reads the catalog: the services with their tags, a
// service's instances with their checks, ?passing leaving out the
// critical ones, ?tag= filtering, and the nodes; every answer carries
// X-Consul-Index.
func TestConsulClientReadsCatalog(t *testing.T) {
	h := newConsulHarness(t)
	h.register(t, "default", "db-1", "db", "10.0.0.9", 5432, "primary")
	h.register(t, "default", "db-2", "db", "10.0.0.10", 5432, "replica")
	h.register(t, "default", "cache-1", "cache", "10.0.0.11", 6379)
	h.setCheck(t, "default", "db-1", catalog.CheckPassing)
	h.setCheck(t, "default", "db-2", catalog.CheckCritical)

	services, meta, err := h.client.Catalog().Services(&consul.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(services) != 2 || strings.Join(services["db"], ",") != "primary,replica" || len(services["cache"]) != 0 {
		t.Fatalf("services = %v", services)
	}
	if meta.LastIndex == 0 {
		t.Fatal("no X-Consul-Index")
	}

	all, _, err := h.client.Health().Service("db", "", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].Service.ID != "db-1" || all[1].Service.ID != "db-2" {
		t.Fatalf("health of db = %+v", all)
	}
	e := all[0]
	if e.Service.Service != "db" || e.Service.Address != "10.0.0.9" || e.Service.Port != 5432 || e.Service.Meta["version"] != "16" ||
		len(e.Service.Tags) != 1 || e.Service.Tags[0] != "primary" || e.Service.Namespace != "default" {
		t.Fatalf("service of db-1 = %+v", e.Service)
	}
	if e.Node.Node != "db-1" || e.Node.Address != "10.0.0.9" || e.Node.Datacenter != "dc1" || e.Node.Meta[catalog.ExternalNodeMeta] != "true" {
		t.Fatalf("node of db-1 = %+v", e.Node)
	}
	if len(e.Checks) != 1 || e.Checks[0].CheckID != "alive" || e.Checks[0].Status != consul.HealthPassing || e.Checks[0].ServiceID != "db-1" ||
		e.Checks[0].Type != catalog.ConsulCheckTypeTTL || e.Checks[0].Output != "set by the test" {
		t.Fatalf("checks of db-1 = %+v", e.Checks)
	}
	if all[1].Checks.AggregatedStatus() != consul.HealthCritical {
		t.Fatalf("db-2 = %+v", all[1].Checks)
	}

	passing, _, err := h.client.Health().Service("db", "", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(passing) != 1 || passing[0].Service.ID != "db-1" {
		t.Fatalf("?passing = %+v, want db-1 alone", passing)
	}
	// Nobody has reported cache-1's check: critical, so not passing.
	if none, _, err := h.client.Health().Service("cache", "", true, nil); err != nil || len(none) != 0 {
		t.Fatalf("?passing of a service whose check nobody reported = %+v, %v", none, err)
	}
	tagged, _, err := h.client.Health().Service("db", "replica", false, nil)
	if err != nil || len(tagged) != 1 || tagged[0].Service.ID != "db-2" {
		t.Fatalf("?tag=replica = %+v, %v", tagged, err)
	}
	if unknown, _, err := h.client.Health().Service("nope", "", false, nil); err != nil || unknown == nil || len(unknown) != 0 {
		t.Fatalf("an unknown service = %#v, %v; want an empty list", unknown, err)
	}

	cat, _, err := h.client.Catalog().Service("db", "primary", nil)
	if err != nil || len(cat) != 1 || cat[0].ServiceID != "db-1" || cat[0].ServiceAddress != "10.0.0.9" || cat[0].ServicePort != 5432 || cat[0].Node != "db-1" || cat[0].Datacenter != "dc1" {
		t.Fatalf("catalog service db ?tag=primary = %+v, %v", cat, err)
	}

	self, err := h.client.Agent().Self()
	if err != nil || self["Config"]["Datacenter"] != "dc1" {
		t.Fatalf("agent/self = %v, %v", self, err)
	}

	operator, _ := consul.NewClient(&consul.Config{Address: strings.TrimPrefix(h.url, "http://"), Token: "operator"})
	nodes, _, err := operator.Catalog().Nodes(nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range nodes {
		names = append(names, n.Node)
	}
	if strings.Join(names, ",") != "cache-1,db-1,db-2" {
		t.Fatalf("nodes = %v", names)
	}
}

// A blocking query returns when a check changes, with a higher index;
// with nothing changing it returns at its wait with the same index.
func TestConsulBlockingQuery(t *testing.T) {
	h := newConsulHarness(t)
	h.register(t, "default", "db-1", "db", "10.0.0.9", 5432)
	h.setCheck(t, "default", "db-1", catalog.CheckPassing)
	entries, meta, err := h.client.Health().Service("db", "", true, &consul.QueryOptions{RequireConsistent: true})
	if err != nil || len(entries) != 1 {
		t.Fatalf("before: %+v, %v", entries, err)
	}
	at := meta.LastIndex

	// Nothing of db changes (another service does): the query holds for
	// its wait, then answers as before, at the same index: db's own.
	h.register(t, "default", "cache-1", "cache", "10.0.0.11", 6379)
	h.setCheck(t, "default", "cache-1", catalog.CheckPassing)
	start := time.Now()
	same, meta2, err := h.client.Health().Service("db", "", true, &consul.QueryOptions{WaitIndex: at, WaitTime: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if meta2.LastIndex != at || len(same) != 1 {
		t.Fatalf("after a wait with no change: index %d (was %d), %+v", meta2.LastIndex, at, same)
	}
	if held := time.Since(start); held < 200*time.Millisecond {
		t.Fatalf("the query answered after %v, before its wait of 200ms", held)
	}

	// A check changes while a query waits: it answers with the change.
	type result struct {
		entries []*consul.ServiceEntry
		meta    *consul.QueryMeta
		err     error
	}
	got := make(chan result, 1)
	go func() {
		e, m, err := h.client.Health().Service("db", "", true, &consul.QueryOptions{WaitIndex: at, WaitTime: 5 * time.Minute})
		got <- result{e, m, err}
	}()
	h.setCheck(t, "default", "db-1", catalog.CheckCritical)
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.meta.LastIndex <= at || len(r.entries) != 0 {
		t.Fatalf("after the check went critical: index %d (was %d), %+v", r.meta.LastIndex, at, r.entries)
	}

	// An instance that leaves wakes its service's watchers too.
	at = r.meta.LastIndex
	go func() {
		e, m, err := h.client.Health().Service("db", "", false, &consul.QueryOptions{WaitIndex: at, WaitTime: 5 * time.Minute})
		got <- result{e, m, err}
	}()
	if _, err := h.api.Delete(context.Background(), &pbresource.DeleteRequest{Id: catalog.ServiceInstanceID("default", "db-1")}); err != nil {
		t.Fatal(err)
	}
	r = <-got
	if r.err != nil || r.meta.LastIndex <= at || len(r.entries) != 0 {
		t.Fatalf("after db-1 left: index %d (was %d), %+v, %v", r.meta.LastIndex, at, r.entries, r.err)
	}
}

// Bad parameters are refused with the parameter named, and a wait past
// Consul's cap is capped, not refused.
func TestConsulRefusesBadParameters(t *testing.T) {
	h := newConsulHarness(t)
	for _, tc := range []struct{ path, want string }{
		{"/v1/health/service/db?wait=forever", `wait: "forever" is not a duration`},
		{"/v1/health/service/db?wait=-1s", `wait: "-1s" is not a duration`},
		{"/v1/health/service/db?index=x", `index: "x" is not a non-negative integer`},
		{"/v1/health/service/db?index=-1", `index: "-1" is not a non-negative integer`},
		{"/v1/health/service/db?passing=maybe", "passing: must be given bare"},
		{"/v1/health/service/db?filter=Service.Port==1", "filter: is not served"},
		{"/v1/health/service/db?dc=dc2", `dc: this server answers for datacenter "dc1" only`},
		{"/v1/health/service/db?ns=default&namespace=other", "ns: names namespace"},
		{"/v1/health/service/db?pasing", `unknown parameter "pasing"`},
		{"/v1/catalog/services?passing", `unknown parameter "passing"`},
		{"/v1/health/service/db?index=1&index=2", "index: given 2 times"},
		{"/v1/health/service/db?stale&consistent", "consistent and stale: ask for one of them"},
	} {
		code, _, body := h.get(t, tc.path, "operator")
		var e wire.Error
		_ = json.Unmarshal([]byte(body), &e)
		if code != http.StatusBadRequest || !strings.Contains(e.Error, tc.want) {
			t.Errorf("GET %s = %d %s, want 400 naming %q", tc.path, code, body, tc.want)
		}
	}
	// ?wait=999h is capped at Consul's 10 minutes: the query is served
	// (it does not block, with no index).
	code, hdr, body := h.get(t, "/v1/health/service/db?wait=999h", "reader")
	if code != http.StatusOK || body != "[]\n" && body != "[]" {
		t.Fatalf("?wait=999h = %d %q", code, body)
	}
	if n, err := strconv.ParseUint(hdr.Get("X-Consul-Index"), 10, 64); err != nil || n == 0 {
		t.Fatalf("X-Consul-Index = %q", hdr.Get("X-Consul-Index"))
	}
}

// A caller without namespace:read on the namespace it asks for is
// refused, whichever of ?ns= and ?namespace= names it, and the nodes need
// operator:read.
func TestConsulRoutesRefuseOutsiders(t *testing.T) {
	h := newConsulHarness(t)
	for _, tc := range []struct{ path, token string }{
		{"/v1/health/service/db", ""},
		{"/v1/health/service/db", "stranger"},
		{"/v1/health/service/db?ns=payments", "reader"},
		{"/v1/health/service/db?namespace=payments", "reader"},
		{"/v1/catalog/service/db?ns=payments", "reader"},
		{"/v1/catalog/services?ns=payments", "reader"},
		{"/v1/catalog/nodes", "reader"},
		{"/v1/agent/self", ""},
	} {
		code, _, body := h.get(t, tc.path, tc.token)
		if code != http.StatusForbidden || !strings.Contains(body, "permission denied") {
			t.Errorf("GET %s with token %q = %d %s, want 403", tc.path, tc.token, code, body)
		}
	}
	var list []json.RawMessage
	code, _, body := h.get(t, "/v1/health/service/db?ns=default", "reader")
	if code != http.StatusOK || json.Unmarshal([]byte(body), &list) != nil {
		t.Fatalf("the reader on its namespace = %d %s", code, body)
	}
	if code, _, _ := h.get(t, "/v1/health/service/db", "reader"); code != http.StatusOK {
		t.Fatalf("the reader on the default namespace = %d", code)
	}
}

// metric is the value of the harness's metric name, which has no labels.
func (h *consulHarness) metric(t testing.TB, name string) float64 {
	t.Helper()
	families, err := h.metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		m := f.GetMetric()[0]
		if c := m.GetCounter(); c != nil {
			return c.GetValue()
		}
		return m.GetGauge().GetValue()
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// Blocking queries that wait on one service answer its change with one
// answer, built and encoded once and written to each
// (trellis_consul_answers_built_total counts the builds); another query
// of the same service builds its own, once, and a change builds anew.
func TestConsulWaitersShareOneAnswer(t *testing.T) {
	const waiters = 50
	h := newConsulHarness(t)
	h.register(t, "default", "db-1", "db", "10.0.0.9", 5432, "primary")
	h.register(t, "default", "db-2", "db", "10.0.0.10", 5432, "replica")
	h.setCheck(t, "default", "db-1", catalog.CheckCritical)
	code, hdr, _ := h.get(t, "/v1/health/service/db?passing&consistent", "reader")
	if code != http.StatusOK {
		t.Fatalf("before: %d", code)
	}
	before := hdr.Get("X-Consul-Index")

	type answer struct {
		code        int
		index, body string
		err         error
	}
	got := make(chan answer, waiters)
	for range waiters {
		go func() {
			req, _ := http.NewRequest("GET", h.url+"/v1/health/service/db?passing&index="+before, nil)
			req.Header.Set("X-Consul-Token", "reader")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				got <- answer{err: err}
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			got <- answer{code: resp.StatusCode, index: resp.Header.Get("X-Consul-Index"), body: string(b), err: err}
		}()
	}
	// Every waiter is waiting before the change.
	for h.metric(t, "trellis_consul_blocking_queries") != waiters {
		time.Sleep(time.Millisecond)
	}
	built := h.metric(t, "trellis_consul_answers_built_total")
	h.setCheck(t, "default", "db-1", catalog.CheckPassing)
	var first answer
	for i := range waiters {
		a := <-got
		if a.err != nil || a.code != http.StatusOK {
			t.Fatalf("waiter %d: %d %s %v", i, a.code, a.body, a.err)
		}
		if i == 0 {
			first = a
			continue
		}
		if a.index != first.index || a.body != first.body {
			t.Fatalf("waiter %d answered at %s with %s; another at %s with %s", i, a.index, a.body, first.index, first.body)
		}
	}
	var entries []catalog.ConsulServiceEntry
	if err := json.Unmarshal([]byte(first.body), &entries); err != nil || len(entries) != 1 || entries[0].Service.ID != "db-1" || first.index == before {
		t.Fatalf("the waiters' answer at %s (was %s) = %s, %v", first.index, before, first.body, err)
	}
	if n := h.metric(t, "trellis_consul_answers_built_total") - built; n != 1 {
		t.Fatalf("%d waiters' answers built %v times, want once", waiters, n)
	}

	// Another query of db, at the same index: built once, then shared;
	// the order of its tags does not matter.
	for _, path := range []string{"/v1/health/service/db?tag=primary&tag=v1", "/v1/health/service/db?tag=v1&tag=primary&tag=v1"} {
		if code, hdr, body := h.get(t, path, "reader"); code != http.StatusOK || hdr.Get("X-Consul-Index") != first.index || body != "[]\n" {
			t.Fatalf("GET %s = %d at %s: %s", path, code, hdr.Get("X-Consul-Index"), body)
		}
	}
	if code, _, body := h.get(t, "/v1/health/service/db?passing", "reader"); code != http.StatusOK || body != first.body {
		t.Fatalf("?passing again = %d %s", code, body)
	}
	if n := h.metric(t, "trellis_consul_answers_built_total") - built; n != 2 {
		t.Fatalf("after a second query twice: built %v times, want 2", n)
	}

	// A change of db: its answers are built anew.
	h.setCheck(t, "default", "db-2", catalog.CheckPassing)
	all, _, err := h.client.Health().Service("db", "", true, &consul.QueryOptions{RequireConsistent: true})
	if err != nil || len(all) != 2 {
		t.Fatalf("after db-2 passes: %+v, %v", all, err)
	}
	if n := h.metric(t, "trellis_consul_answers_built_total") - built; n != 3 {
		t.Fatalf("after a change: built %v times, want 3", n)
	}
}
