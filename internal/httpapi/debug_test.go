package httpapi_test

import (
	"bytes"
	"net/http"
	"testing"
)

func TestDebugEndpointsOnlyWhenEnabled(t *testing.T) {
	off := newEnv(t, options{})
	mustStatus(t, off.do(http.MethodGet, "/v1/debug/pprof/", ""), http.StatusNotFound)

	on := newEnv(t, options{debug: true})
	r := on.do(http.MethodGet, "/v1/debug/pprof/", "")
	mustStatus(t, r, http.StatusOK)
	if !bytes.Contains(r.body, []byte("goroutine")) {
		t.Fatalf("pprof index does not list the goroutine profile:\n%s", r.body)
	}
	r = on.do(http.MethodGet, "/v1/debug/pprof/goroutine?debug=1", "")
	mustStatus(t, r, http.StatusOK)
	if !bytes.Contains(r.body, []byte("goroutine profile")) {
		t.Fatalf("goroutine profile missing:\n%.300s", r.body)
	}
}
