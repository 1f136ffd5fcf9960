package httpapi

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the API's own Prometheus collectors. The route label is the
// routing pattern with its method ("GET /v1/resources/{group}/{version}/{kind}"),
// so neither a resource's name nor an arbitrary method ever becomes a label
// value; watches are counted apart from lists ("WATCH ...") since a watch
// lasts as long as its client.
type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	watches  prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trellis_http_requests_total",
			Help: "HTTP API requests served, by route and status code.",
		}, []string{"route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "trellis_http_request_duration_seconds",
			Help:    "HTTP API request latency, by route and status code (a watch's is its lifetime).",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}, []string{"route", "code"}),
		watches: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trellis_http_watches",
			Help: "Watch streams open on the HTTP API.",
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.requests, m.latency, m.watches} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func (m *metrics) observe(rec *recorder, d time.Duration) {
	code := strconv.Itoa(rec.statusCode())
	m.requests.WithLabelValues(rec.route, code).Inc()
	m.latency.WithLabelValues(rec.route, code).Observe(d.Seconds())
}
