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

// health is 200 while this server can serve writes through a leader, 503
// when the cluster has none (load balancers take the server out).
func (h *Handler) health(w http.ResponseWriter, _ *http.Request) error {
	leader := h.cluster.Leader()
	if leader == "" {
		writeJSON(w, http.StatusServiceUnavailable, wire.Health{
			Status: "unavailable",
			Error:  "no cluster leader",
			Code:   wire.CodeUnavailable,
		})
		return nil
	}
	writeJSON(w, http.StatusOK, wire.Health{Status: "ok", Leader: leader})
	return nil
}

func (h *Handler) serveMetrics(w http.ResponseWriter, r *http.Request) error {
	promhttp.HandlerFor(h.gatherer, promhttp.HandlerOpts{}).ServeHTTP(w, r)
	return nil
}
