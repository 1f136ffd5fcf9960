package httpapi

import (
	"net/http"
	"net/http/pprof"
	"strings"

	"trellis.dev/trellis/internal/acl"
)

// debugRoutes serves Go's runtime profiles (heap, goroutines, a CPU
// profile...) for diagnosing a server, when it was started with
// -enable-debug. For example:
//
//	go tool pprof http://127.0.0.1:7700/v1/debug/pprof/profile?seconds=10
//
// They need operator:read: a profile shows the server's memory and code.
func (h *Handler) debugRoutes() {
	const prefix = "/v1/debug/pprof/"
	h.handle("GET "+prefix, acl.OperatorRead, func(w http.ResponseWriter, r *http.Request) error {
		// pprof.Index serves named profiles by the path's last element,
		// which it expects under /debug/pprof/.
		r2 := r.Clone(r.Context())
		r2.URL.Path = "/debug/pprof/" + strings.TrimPrefix(r.URL.Path, prefix)
		pprof.Index(w, r2)
		return nil
	})
	h.handle("GET "+prefix+"cmdline", acl.OperatorRead, serve(pprof.Cmdline))
	h.handle("GET "+prefix+"profile", acl.OperatorRead, serve(pprof.Profile))
	h.handle("GET "+prefix+"symbol", acl.OperatorRead, serve(pprof.Symbol))
	h.handle("GET "+prefix+"trace", acl.OperatorRead, serve(pprof.Trace))
}

// serve adapts a plain handler, which writes its own errors.
func serve(fn http.HandlerFunc) HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		fn(w, r)
		return nil
	}
}
