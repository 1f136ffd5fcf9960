package httpapi

import (
	"net/http"
	"net/http/pprof"
	"strings"
)

// debugRoutes serves Go's runtime profiles (heap, goroutines, a CPU
// profile...) for diagnosing a server, when it was started with
// -enable-debug. For example:
//
//	go tool pprof http://127.0.0.1:7700/v1/debug/pprof/profile?seconds=10
func (h *Handler) debugRoutes() {
	const prefix = "/v1/debug/pprof/"
	h.mux.HandleFunc("GET "+prefix, func(w http.ResponseWriter, r *http.Request) {
		// pprof.Index serves named profiles by the path's last element,
		// which it expects under /debug/pprof/.
		r2 := r.Clone(r.Context())
		r2.URL.Path = "/debug/pprof/" + strings.TrimPrefix(r.URL.Path, prefix)
		pprof.Index(w, r2)
	})
	h.mux.HandleFunc("GET "+prefix+"cmdline", pprof.Cmdline)
	h.mux.HandleFunc("GET "+prefix+"profile", pprof.Profile)
	h.mux.HandleFunc("GET "+prefix+"symbol", pprof.Symbol)
	h.mux.HandleFunc("GET "+prefix+"trace", pprof.Trace)
}
