package controller

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Result labels of the reconciles_total metric.
const (
	resultSuccess  = "success"
	resultRequeue  = "requeue"
	resultError    = "error"
	resultTerminal = "terminal"
	resultPanic    = "panic"
)

// metrics are the Manager's Prometheus collectors, labelled by controller.
type metrics struct {
	depth         *prometheus.GaugeVec
	reconciles    *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	retries       *prometheus.CounterVec
	watchRestarts *prometheus.CounterVec
	leader        prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "trellis", Subsystem: "controller", Name: "queue_depth",
			Help: "Requests ready to run, waiting for a worker.",
		}, []string{"controller"}),
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "trellis", Subsystem: "controller", Name: "reconciles_total",
			Help: "Reconciles run, by result (success, requeue, error, terminal, panic).",
		}, []string{"controller", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "trellis", Subsystem: "controller", Name: "reconcile_duration_seconds",
			Help:    "Time spent in Reconcile.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}, []string{"controller"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "trellis", Subsystem: "controller", Name: "retries_total",
			Help: "Requests queued again with backoff after a failed reconcile.",
		}, []string{"controller"}),
		watchRestarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "trellis", Subsystem: "controller", Name: "watch_restarts_total",
			Help: "Watches re-established, by how (resume from an index, or relist).",
		}, []string{"type", "how"}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "trellis", Subsystem: "controller", Name: "running",
			Help: "1 while this server is the leader and its controllers run.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.depth, m.reconciles, m.duration, m.retries, m.watchRestarts, m.leader} {
		if err := reg.Register(c); err != nil {
			var already prometheus.AlreadyRegisteredError
			if errors.As(err, &already) {
				return nil, errors.New("controller metrics are already registered on that Registerer: use one Manager per registry")
			}
			return nil, err
		}
	}
	return m, nil
}
