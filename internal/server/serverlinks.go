package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"trellis.dev/trellis/internal/tlsutil"
)

// serverPortMetrics registers trellis_tls_server_links, the live links of
// the server ports by the certificate their peer presented: once the
// Connect CA is up, every one should be a Connect leaf.
func (s *Server) serverPortMetrics(port *tlsutil.ServerPort) error {
	kinds := []string{tlsutil.PeerConnect, tlsutil.PeerClusterCA, tlsutil.LinkHandshaking}
	for _, kind := range kinds {
		g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "trellis_tls_server_links",
			Help:        "Live connections of the server ports (Raft and the server RPCs, both directions) by the certificate the peer presented: connect (its leaf of the Connect CA), cluster_ca (its -tls-cert-file), or handshaking.",
			ConstLabels: prometheus.Labels{"peer_cert": kind},
		}, func() float64 { return float64(port.Links()[kind]) })
		if err := s.metrics.Register(g); err != nil {
			return err
		}
	}
	return nil
}
