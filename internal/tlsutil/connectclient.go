package tlsutil

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc/credentials"
)

// ConnectSource is what a client holds of the Connect CA: its own leaf
// and the CA's roots it follows (an agent's leaf cache).
type ConnectSource interface {
	// ConnectCertificate is the client's leaf, with its chain and key;
	// nil while it has none valid.
	ConnectCertificate() *tls.Certificate
	// ConnectRoots are the CA's trust domain and a pool of every root it
	// lists, active or not; "" and nil before the client knows them.
	ConnectRoots() (trustDomain string, roots *x509.CertPool)
	// ConnectSigners are the CAs that sign the server leaves of the
	// client's datacenter (ca.DatacenterSigners of the roots).
	ConnectSigners() []*x509.Certificate
}

// ConnectClientConfig is the tls.Config of one dial to a server's public
// port by a client of datacenter dc (domain: DefaultDomain when empty)
// whose config from files is base (OutgoingClientConfig: it checks the
// server against the cluster CA, in VerifyConnection) and whose Connect
// CA leaf and roots src holds. It presents src's leaf whenever src has
// one. Once src has both a leaf and the roots, it asks for
// ConnectServerName (SNI) and accepts as the server a Connect server leaf
// of dc and of src's trust domain chaining to src's roots and signed by
// one of src's signers (dc's own CA, as the server ports require), or, from a
// server that has no Connect leaf yet, what base accepts: the client then
// talks to the servers with nothing from files but the cluster CA it
// needed for its first join. Make one per dial (GRPCClientCredentials).
func ConnectClientConfig(base *tls.Config, dc, domain string, src ConnectSource) *tls.Config {
	out := PresentingLeaf(base, src.ConnectCertificate)
	td, roots := src.ConnectRoots()
	baseVerify := base.VerifyConnection
	if src.ConnectCertificate() == nil || roots == nil || td == "" || baseVerify == nil {
		return out
	}
	if domain == "" {
		domain = DefaultDomain
	}
	out.ServerName = ConnectServerName(dc, domain)
	out.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 || len(cs.PeerCertificates[0].URIs) == 0 {
			// A certificate file, from a server that has no leaf yet.
			return baseVerify(cs)
		}
		chains, err := verifyConnectLeafChains(cs.PeerCertificates, td, roots, dc, "/server/dc/", "a server", x509.ExtKeyUsageServerAuth, time.Now())
		if err != nil {
			return fmt.Errorf("tls: server refused: %w", err)
		}
		if !IssuedByOneOf(chains, src.ConnectSigners()) {
			return fmt.Errorf("tls: server refused: %s is not signed by a CA of datacenter %s (its issuer is %q)",
				cs.PeerCertificates[0].URIs[0], dc, cs.PeerCertificates[0].Issuer.CommonName)
		}
		return nil
	}
	return out
}

// GRPCClientCredentials are gRPC transport credentials that dial with
// config(), called for each connection, asking for the name it sets
// (SNI) rather than the address dialed.
func GRPCClientCredentials(config func() *tls.Config) credentials.TransportCredentials {
	return perConnCredentials{client: func(net.Conn) *tls.Config { return config() }}
}

var errClientOnly = errors.New("tls: client credentials cannot serve")
