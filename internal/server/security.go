package server

// WarnPlaintext is the warning of a Raft server without TLS files: it
// still runs, as a cluster that has not set certificates up yet must, but
// says so at start (logged at WARN) and in every /v1/health answer, so
// that it is not mistaken for a secured one.
const WarnPlaintext = "INSECURE: servers talk to each other in plaintext: anyone who reaches the Raft and " +
	"server-to-server ports can join the cluster or write anything, unchecked. " +
	"Give every server -tls-ca-file, -tls-cert-file and -tls-key-file (see `trellis tls`, docs/cluster.md)"

// securityWarnings lists what is unsafe about how cfg runs the server:
// only a Raft server has links to other servers to protect, and it needs
// TLS on them.
func securityWarnings(cfg Config) []string {
	if cfg.Raft != nil && cfg.TLS == nil {
		return []string{WarnPlaintext}
	}
	return nil
}
