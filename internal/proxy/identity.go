package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/mesh"
)

// The proxy's TLS identity: its leaf and the trusted roots, read from the
// current snapshot at every handshake, so that a renewed leaf or rotated
// roots apply to the next handshake and established connections stay.

// ALPN protocols the inbound listener offers for http and grpc services.
var l7Protos = []string{"h2", "http/1.1"}

// HandshakeError is why a peer's certificate was refused; Reason is the
// label it is counted under.
type HandshakeError struct {
	Reason string
	Err    error
}

func (e *HandshakeError) Error() string { return "peer refused (" + e.Reason + "): " + e.Err.Error() }
func (e *HandshakeError) Unwrap() error { return e.Err }

// Reasons of a refused handshake (HandshakeError.Reason and the reason
// label of the handshake failures counted).
const (
	ReasonNoCertificate = "no_client_certificate"
	ReasonUnknownCA     = "unknown_ca"
	ReasonExpired       = "expired"
	ReasonBadCert       = "bad_certificate"
	ReasonTrustDomain   = "foreign_trust_domain"
	ReasonSPIFFE        = "bad_spiffe_id"
	ReasonPlaintext     = "plaintext"
	ReasonNoSnapshot    = "no_snapshot"
	ReasonTimeout       = "timeout"
	ReasonHandshake     = "handshake"
)

// ServerTLS is the inbound listener's TLS configuration: TLS 1.3 with
// the current leaf, requiring a client certificate that chains to a
// current root and carries a service's SPIFFE id of the trust domain.
// PeerService reads the verified peer from the connection state.
func (p *Proxy) ServerTLS() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			st := p.state.Load()
			if st == nil {
				return nil, &HandshakeError{Reason: ReasonNoSnapshot, Err: errors.New("the proxy holds no snapshot yet")}
			}
			c := &tls.Config{
				MinVersion:   tls.VersionTLS13,
				Certificates: []tls.Certificate{*st.cert},
				// Verified in VerifyConnection against this snapshot's
				// roots and trust domain, at the proxy's clock.
				ClientAuth: tls.RequestClientCert,
				VerifyConnection: func(cs tls.ConnectionState) error {
					_, err := p.verifyPeer(st, cs.PeerCertificates, x509.ExtKeyUsageClientAuth)
					return err
				},
			}
			if in := st.snap.GetInbound(); in != nil && mesh.SpeaksHTTP(in.GetProtocol()) {
				c.NextProtos = l7Protos
			}
			return c, nil
		},
	}
}

// ClientTLS is the outbound side's TLS configuration for a connection to
// a proxy that must present expectedSPIFFE: TLS 1.3 with the current
// leaf, the server's chain verified against the current roots and its
// SPIFFE id compared with expectedSPIFFE.
func (p *Proxy) ClientTLS(expectedSPIFFE string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// The standard verification checks a host name; VerifyConnection
		// checks the chain and the SPIFFE id instead.
		InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			st := p.state.Load()
			if st == nil {
				return nil, errors.New("the proxy holds no snapshot yet")
			}
			return st.cert, nil
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			st := p.state.Load()
			if st == nil {
				return &HandshakeError{Reason: ReasonNoSnapshot, Err: errors.New("the proxy holds no snapshot yet")}
			}
			id, err := p.verifyPeer(st, cs.PeerCertificates, x509.ExtKeyUsageServerAuth)
			if err != nil {
				return err
			}
			if id.String() != expectedSPIFFE {
				return &HandshakeError{Reason: ReasonSPIFFE, Err: fmt.Errorf("the server is %s, not %s", id, expectedSPIFFE)}
			}
			return nil
		},
	}
}

// verifyPeer checks a peer's certificates (its leaf first) against the
// roots of st at the proxy's clock, for usage, and returns its service's
// SPIFFE id, which must be of st's trust domain.
func (p *Proxy) verifyPeer(st *state, certs []*x509.Certificate, usage x509.ExtKeyUsage) (ca.ServiceID, error) {
	if len(certs) == 0 {
		return ca.ServiceID{}, &HandshakeError{Reason: ReasonNoCertificate, Err: errors.New("the peer presented no certificate")}
	}
	if _, err := verifyChain(certs[0], certs[1:], st.roots, p.cfg.Now(), usage); err != nil {
		return ca.ServiceID{}, err
	}
	return serviceIDOf(st, certs[0])
}

// serviceIDOf reads a verified leaf's SPIFFE id, a service's of st's
// trust domain.
func serviceIDOf(st *state, leaf *x509.Certificate) (ca.ServiceID, error) {
	if len(leaf.URIs) != 1 {
		return ca.ServiceID{}, &HandshakeError{Reason: ReasonSPIFFE, Err: fmt.Errorf("the leaf has %d URI SANs, not one SPIFFE id", len(leaf.URIs))}
	}
	parsed, err := ca.ParseID(leaf.URIs[0])
	if err != nil {
		return ca.ServiceID{}, &HandshakeError{Reason: ReasonSPIFFE, Err: err}
	}
	id, ok := parsed.(ca.ServiceID)
	if !ok {
		return ca.ServiceID{}, &HandshakeError{Reason: ReasonSPIFFE, Err: fmt.Errorf("%s is not a service's id", parsed)}
	}
	if td := st.snap.GetIdentity().GetTrustDomain(); id.TrustDomain != td {
		return ca.ServiceID{}, &HandshakeError{Reason: ReasonTrustDomain, Err: fmt.Errorf("%s is not of the trust domain %s", id, td)}
	}
	return id, nil
}

// verifyChain verifies leaf, with the intermediates a peer sent, against
// roots at now for usage.
func verifyChain(leaf *x509.Certificate, inter []*x509.Certificate, roots *x509.CertPool, now time.Time, usage x509.ExtKeyUsage) ([][]*x509.Certificate, error) {
	pool := x509.NewCertPool()
	for _, c := range inter {
		pool.AddCert(c)
	}
	chains, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{usage}})
	if err == nil {
		return chains, nil
	}
	var invalid x509.CertificateInvalidError
	var unknown x509.UnknownAuthorityError
	switch {
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return nil, &HandshakeError{Reason: ReasonExpired, Err: err}
	case errors.As(err, &unknown):
		return nil, &HandshakeError{Reason: ReasonUnknownCA, Err: err}
	}
	return nil, &HandshakeError{Reason: ReasonBadCert, Err: err}
}

// leafChain is the parsed intermediates that follow a certificate's leaf.
func leafChain(c *tls.Certificate) []*x509.Certificate {
	var out []*x509.Certificate
	for _, der := range c.Certificate[1:] {
		if x, err := x509.ParseCertificate(der); err == nil {
			out = append(out, x)
		}
	}
	return out
}

// reasonOf is the label a failed handshake is counted under.
func reasonOf(err error) string {
	var he *HandshakeError
	switch {
	case errors.As(err, &he):
		return he.Reason
	case errors.Is(err, os.ErrDeadlineExceeded):
		return ReasonTimeout
	}
	return ReasonHandshake
}
