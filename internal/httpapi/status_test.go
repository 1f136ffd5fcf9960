package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"trellis.dev/trellis/internal/httpapi/wire"
)

func TestStatusEndpoints(t *testing.T) {
	e := newEnv(t, options{})

	r := e.do(http.MethodGet, "/v1/status/leader", "")
	mustStatus(t, r, http.StatusOK)
	if string(r.body) != "\"127.0.0.1:7702\"\n" {
		t.Fatalf("leader %q", r.body)
	}
	r = e.do(http.MethodGet, "/v1/status/peers", "")
	mustStatus(t, r, http.StatusOK)
	if string(r.body) != "[\"127.0.0.1:7702\",\"127.0.0.1:9999\"]\n" {
		t.Fatalf("peers %q", r.body)
	}
	r = e.do(http.MethodGet, "/v1/health", "")
	mustStatus(t, r, http.StatusOK)
	var h wire.Health
	r.json(t, &h)
	if h.Status != "ok" {
		t.Fatalf("health %+v", h)
	}

	e.cluster.leader = ""
	r = e.do(http.MethodGet, "/v1/status/leader", "")
	mustStatus(t, r, http.StatusOK)
	if string(r.body) != "\"\"\n" {
		t.Fatalf("no leader: %q", r.body)
	}
	r = e.do(http.MethodGet, "/v1/status/peers", "")
	if string(r.body) != "[]\n" {
		t.Fatalf("no peers: %q", r.body)
	}
	r = e.do(http.MethodGet, "/v1/health", "")
	mustStatus(t, r, http.StatusServiceUnavailable)
	if er := r.apiError(t); er.Code != wire.CodeUnavailable || er.Error != "no cluster leader" {
		t.Fatalf("health without leader: %+v", er)
	}
	// ?stale answers anyway, with the same reason.
	r = e.do(http.MethodGet, "/v1/health?stale=1", "")
	mustStatus(t, r, http.StatusOK)
	r.json(t, &h)
	if h.Status != "unavailable" || h.Error != "no cluster leader" {
		t.Fatalf("stale health without leader: %+v", h)
	}
	mustStatus(t, e.do(http.MethodGet, "/v1/health?bogus=1", ""), http.StatusBadRequest)
}

func TestMetrics(t *testing.T) {
	e := newEnv(t, options{})
	// What others register on the same registry is served too.
	raftApplied := prometheus.NewCounter(prometheus.CounterOpts{Name: "trellis_raft_test_applied_total", Help: "test"})
	e.registry.MustRegister(raftApplied)
	raftApplied.Add(3)

	mustStatus(t, e.do(http.MethodPut, nsPath+"a", `{}`), http.StatusOK)
	mustStatus(t, e.do(http.MethodGet, nsPath+"zzz", ""), http.StatusNotFound)
	r := e.do(http.MethodGet, "/v1/metrics", "")
	mustStatus(t, r, http.StatusOK)
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("metrics content type %q", ct)
	}
	body := string(r.body)
	for _, want := range []string{
		`trellis_http_requests_total{code="200",route="PUT /v1/resources/{group}/{version}/{kind}/{name}"} 1`,
		`trellis_http_requests_total{code="404",route="GET /v1/resources/{group}/{version}/{kind}/{name}"} 1`,
		`trellis_http_request_duration_seconds_count{code="200",route="PUT /v1/resources/{group}/{version}/{kind}/{name}"} 1`,
		`trellis_http_watches 0`,
		`trellis_raft_test_applied_total 3`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}
