package tlsutil

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
)

// ErrNotServer is returned for a tls.Config only a server may use (one
// that serves, or dials another server), from a Configurator that was not
// made for a server.
var ErrNotServer = errors.New("not a server's TLS configuration: it needs -tls-cert-file with a server certificate")

// IncomingPublicConfig is for the public ports (gRPC, HTTPS). It serves
// the server's Connect CA leaf to a client that asks for
// ConnectServerName (SNI), when the server has one, and the server
// certificate file to every other: the CLI, curl and an agent at its
// first join hold only the cluster CA, and ask for another name or none.
// A client certificate is asked for but not required, since clients are
// authenticated by their ACL tokens there (a CLI, or an agent before it
// has its leaf, presents none); one that is presented must verify, as a
// client certificate of the cluster CA or as an agent leaf of the Connect
// CA (see SetConnectRoots), or the handshake is refused.
func (c *Configurator) IncomingPublicConfig() (*tls.Config, error) {
	if !c.cfg.Server {
		return nil, ErrNotServer
	}
	return &tls.Config{
		MinVersion:     tls.VersionTLS13,
		GetCertificate: c.certificateByName,
		ClientAuth:     tls.RequestClientCert,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return nil
			}
			return c.verifyPublicClient(cs.PeerCertificates)
		},
	}, nil
}

// OutgoingClientConfig is for agents and CLIs dialing a server's public
// port: the server must present a server certificate of this cluster's CA
// and datacenter, whatever address it was dialed at. The process's own
// certificate, if it has one, is presented when asked for.
func (c *Configurator) OutgoingClientConfig() *tls.Config { return c.outgoing() }

// OutgoingClientConfigWith is OutgoingClientConfig presenting leaf()'s
// certificate, when it returns one, instead of the process's own: the
// agent's leaf from its leaf cache with auto-encrypt. leaf is called at
// every handshake, so a renewed leaf is presented from the next one on.
func (c *Configurator) OutgoingClientConfigWith(leaf func() *tls.Certificate) *tls.Config {
	return PresentingLeaf(c.outgoing(), leaf)
}

// PresentingLeaf is a copy of the client config cfg that presents
// leaf()'s certificate when the server asks for one and leaf returns one,
// and otherwise what cfg would. leaf is called at every handshake.
func PresentingLeaf(cfg *tls.Config, leaf func() *tls.Certificate) *tls.Config {
	out := cfg.Clone()
	fallback := cfg.GetClientCertificate
	out.GetClientCertificate = func(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
		if cert := leaf(); cert != nil {
			return cert, nil
		}
		if fallback != nil {
			return fallback(cri)
		}
		return &tls.Certificate{}, nil
	}
	return out
}

func (c *Configurator) outgoing() *tls.Config { return c.outgoingTo(c.ServerName()) }

// outgoingTo is the TLS of a dial whose peer must present a certificate of
// the cluster CA naming name (for server authentication), whatever address
// it was dialed at; this process presents its own certificate.
func (c *Configurator) outgoingTo(name string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// Sent as SNI; the check that matters is in VerifyConnection.
		ServerName:           name,
		GetClientCertificate: c.getClientCertificate,
		// Go's own verification would use RootCAs fixed when this config
		// was made and the dialed host name; VerifyConnection does the
		// whole verification instead, against the CA loaded now and the
		// name the peer's role gives it (servers are dialed by IP address,
		// and a peer's address says nothing of its role).
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return c.verifyPeer(cs, x509.ExtKeyUsageServerAuth, name)
		},
	}
}

func (c *Configurator) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if m := c.current.Load(); m.cert != nil {
		return m.cert, nil
	}
	return nil, ErrNotServer
}

func (c *Configurator) getClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	if m := c.current.Load(); m.cert != nil {
		return m.cert, nil
	}
	// An empty certificate sends none; the server decides whether that
	// is enough.
	return &tls.Certificate{}, nil
}

// verifyPeer checks the peer's certificate chain against the CA loaded
// now, for usage, and that it names name.
func (c *Configurator) verifyPeer(cs tls.ConnectionState, usage x509.ExtKeyUsage, name string) error {
	if len(cs.PeerCertificates) == 0 {
		return fmt.Errorf("tls: peer refused: it presented no certificate; it needs one of %s", name)
	}
	m := c.current.Load()
	if err := verifyLeaf(cs.PeerCertificates[0], cs.PeerCertificates[1:], m.roots, c.cfg.Now(), name, []x509.ExtKeyUsage{usage}); err != nil {
		return fmt.Errorf("tls: peer refused: %w", err)
	}
	return nil
}
