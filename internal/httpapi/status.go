package httpapi

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"trellis.dev/trellis/internal/httpapi/wire"
)

func (h *Handler) leader(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r.URL.Query()); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, h.cluster.Leader())
	return nil
}

func (h *Handler) peers(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r.URL.Query()); err != nil {
		return err
	}
	peers, err := h.cluster.Peers()
	if err != nil {
		return err
	}
	if peers == nil {
		peers = []string{}
	}
	writeJSON(w, http.StatusOK, peers)
	return nil
}

// health is 200 while this server's answers can be trusted: it is the
// leader and has caught up, or it hears from a leader and has applied what
// that leader had committed; 503 with the reason otherwise (load balancers
// take the server out). ?stale=1 answers 200 with the same body whenever
// the server is up, for callers that want the details anyway.
func (h *Handler) health(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r.URL.Query(), "stale")
	if err != nil {
		return err
	}
	hl := h.cluster.Health()
	code := http.StatusOK
	if hl.Status != "ok" {
		hl.Status = "unavailable"
		hl.Code = wire.CodeUnavailable
		if !q.stale {
			code = http.StatusServiceUnavailable
		}
	}
	writeJSON(w, code, hl)
	return nil
}

func (h *Handler) serveMetrics(w http.ResponseWriter, r *http.Request) error {
	promhttp.HandlerFor(h.gatherer, promhttp.HandlerOpts{}).ServeHTTP(w, r)
	return nil
}
