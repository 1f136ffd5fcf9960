package agent

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"trellis.dev/trellis/internal/tlsutil"
)

// An agent given the cluster's CA reaches a server whose public gRPC port
// serves TLS: it registers its instance and its heartbeats are taken.
func TestAgentOverTLS(t *testing.T) {
	b, err := tlsutil.NewDevBundle("", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	serverTLS, err := tlsutil.NewFromBundle(b)
	if err != nil {
		t.Fatal(err)
	}
	srv := startServerTLS(t, 0, serverTLS)
	// What `trellis agent -tls-ca-file` does: the CA alone, no
	// certificate of its own.
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, b.CA.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	caOnly, err := tlsutil.New(tlsutil.Config{CAFile: caFile})
	if err != nil {
		t.Fatal(err)
	}
	cfg := config(t, "i-1", newProcTable(t), srv)
	cfg.TLS = caOnly.OutgoingClientConfig()
	a := startAgent(t, cfg)
	registered(t, srv, a)
	eventually(t, "the server takes the agent's heartbeats over TLS", func() bool { return srv.acceptedHeartbeats(t) >= 1 })
}
