package proxy

import (
	"net"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Stats are a proxy's Prometheus metrics, on a registry of its own (the
// admin port's /stats serves Registry). The listener label is inbound,
// outbound or an explicit upstream's bind address.
type Stats struct {
	Registry *prometheus.Registry

	// Connections counts connections accepted; Active those open now.
	Connections *prometheus.CounterVec // listener
	Active      *prometheus.GaugeVec   // listener
	// Bytes counts bytes on the wire, by direction (rx: received, tx:
	// sent).
	Bytes *prometheus.CounterVec // listener, direction
	// Requests counts HTTP requests answered, by status code.
	Requests *prometheus.CounterVec // listener, code
	// HandshakeFailures counts refused TLS handshakes by reason
	// (HandshakeError.Reason).
	HandshakeFailures *prometheus.CounterVec // listener, reason
	// ProtocolErrors counts connections closed for what they sent after
	// the handshake: a malformed HTTP/2 preface, headers too slow.
	ProtocolErrors *prometheus.CounterVec // listener, reason
	// IntentionDenials counts denied connections (level l4) and requests
	// (l7) by the caller's namespace/service.
	IntentionDenials *prometheus.CounterVec // source, level
	// ConnectionsClosedBySnapshot counts established connections closed
	// because a new snapshot no longer allows their peer.
	ConnectionsClosedBySnapshot prometheus.Counter
	// SnapshotUpdates and SnapshotRejections count snapshots taken and
	// refused.
	SnapshotUpdates    prometheus.Counter
	SnapshotRejections prometheus.Counter
}

// Reasons of ProtocolErrors.
const (
	ReasonHTTP2Preface  = "http2_preface"
	ReasonHeaderTimeout = "header_timeout"
)

func newStats() *Stats {
	s := &Stats{
		Registry:                    prometheus.NewRegistry(),
		Connections:                 prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_proxy_connections_total", Help: "Connections accepted, by listener."}, []string{"listener"}),
		Active:                      prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "trellis_proxy_connections_active", Help: "Connections open, by listener."}, []string{"listener"}),
		Bytes:                       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_proxy_bytes_total", Help: "Bytes on the wire, by listener and direction (rx, tx)."}, []string{"listener", "direction"}),
		Requests:                    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_proxy_requests_total", Help: "HTTP requests answered, by listener and status code."}, []string{"listener", "code"}),
		HandshakeFailures:           prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_proxy_tls_handshake_failures_total", Help: "TLS handshakes refused, by listener and reason."}, []string{"listener", "reason"}),
		ProtocolErrors:              prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_proxy_protocol_errors_total", Help: "Connections closed for what they sent after the handshake, by listener and reason."}, []string{"listener", "reason"}),
		IntentionDenials:            prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_proxy_intention_denials_total", Help: "Connections (l4) and requests (l7) the intentions denied, by source."}, []string{"source", "level"}),
		ConnectionsClosedBySnapshot: prometheus.NewCounter(prometheus.CounterOpts{Name: "trellis_proxy_connections_closed_by_snapshot_total", Help: "Established connections closed because a new snapshot no longer allows their peer."}),
		SnapshotUpdates:             prometheus.NewCounter(prometheus.CounterOpts{Name: "trellis_proxy_snapshot_updates_total", Help: "Snapshots taken."}),
		SnapshotRejections:          prometheus.NewCounter(prometheus.CounterOpts{Name: "trellis_proxy_snapshot_rejections_total", Help: "Snapshots refused as malformed (the previous one kept)."}),
	}
	s.Registry.MustRegister(s.Connections, s.Active, s.Bytes, s.Requests, s.HandshakeFailures, s.ProtocolErrors,
		s.IntentionDenials, s.ConnectionsClosedBySnapshot, s.SnapshotUpdates, s.SnapshotRejections)
	return s
}

// countingConn counts the bytes read and written on a connection.
type countingConn struct {
	net.Conn
	rx, tx prometheus.Counter
	read   atomic.Int64
}

func (s *Stats) counting(c net.Conn, listener string) *countingConn {
	return &countingConn{Conn: c, rx: s.Bytes.WithLabelValues(listener, "rx"), tx: s.Bytes.WithLabelValues(listener, "tx")}
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.rx.Add(float64(n))
		c.read.Add(int64(n))
	}
	return n, err
}

func (c *countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if n > 0 {
		c.tx.Add(float64(n))
	}
	return n, err
}
