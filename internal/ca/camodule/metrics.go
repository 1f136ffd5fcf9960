package camodule

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"trellis.dev/trellis/internal/ca"
)

// signMetrics are the signing service's metrics on /v1/metrics. Labels
// are fixed words (a refusal's reason, a limit's name), never anything
// of a request, and nothing here ever reads a key.
type signMetrics struct {
	signatures prometheus.Counter
	refusals   *prometheus.CounterVec
	limited    *prometheus.CounterVec
	selfChecks *prometheus.CounterVec
}

// newSignMetrics registers the signer's metrics with reg, including the
// expiry gauges read from the signer's state at each scrape.
func newSignMetrics(reg prometheus.Registerer, s *Signer) (*signMetrics, error) {
	m := &signMetrics{
		signatures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trellis_ca_signatures_total",
			Help: "Leaf certificates this server signed.",
		}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trellis_ca_sign_refusals_total",
			Help: "Certificate signing requests this server refused as bad input, by reason (not_pem, not_csr, bad_signature, uri_san_count, not_spiffe, trust_domain, datacenter, key_type, ca_requested, server_id).",
		}, []string{"reason"}),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trellis_ca_sign_rate_limited_total",
			Help: "Signing requests this server refused over its limit (ResourceExhausted, HTTP 429), by limit: rate (csr_max_per_second) or concurrency (csr_max_concurrent).",
		}, []string{"limit"}),
		selfChecks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trellis_ca_leaf_self_checks_total",
			Help: "Leaves this server verified with the signing certificate before handing them out (the first of each signing key, then one in 1,000), by result: ok, or failed (the key then signs no more on this server).",
		}, []string{"result"}),
	}
	for _, c := range []prometheus.Collector{m.signatures, m.refusals, m.limited, m.selfChecks, expiryCollector{s: s}} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *signMetrics) signed() {
	if m != nil {
		m.signatures.Inc()
	}
}

func (m *signMetrics) refused(err error) {
	var r *ca.Refusal
	if m != nil && errors.As(err, &r) {
		m.refusals.WithLabelValues(r.Reason).Inc()
	}
}

func (m *signMetrics) selfChecked(ok bool) {
	if m == nil {
		return
	}
	result := "ok"
	if !ok {
		result = "failed"
	}
	m.selfChecks.WithLabelValues(result).Inc()
}

func (m *signMetrics) rateLimited(limit string) {
	if m != nil {
		m.limited.WithLabelValues(limit).Inc()
	}
}

var (
	rootExpiryDesc = prometheus.NewDesc("trellis_ca_active_root_expiry_seconds",
		"Seconds until the active root this server signs under expires (absent before there is one).", nil, nil)
	signingExpiryDesc = prometheus.NewDesc("trellis_ca_signing_cert_expiry_seconds",
		"Seconds until the certificate this server signs leaves with expires, when it is an intermediate and not the root itself.", nil, nil)
)

// expiryCollector reports the expiry gauges from the signer's state at
// each scrape, so they count down without anyone setting them.
type expiryCollector struct{ s *Signer }

func (c expiryCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- rootExpiryDesc
	ch <- signingExpiryDesc
}

func (c expiryCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.state.Load()
	if st == nil {
		return
	}
	now := c.s.now()
	ch <- prometheus.MustNewConstMetric(rootExpiryDesc, prometheus.GaugeValue, secondsUntil(st.rootNotAfter, now))
	if !st.signingNotAfter.IsZero() {
		ch <- prometheus.MustNewConstMetric(signingExpiryDesc, prometheus.GaugeValue, secondsUntil(st.signingNotAfter, now))
	}
}

func secondsUntil(t, now time.Time) float64 { return t.Sub(now).Seconds() }
