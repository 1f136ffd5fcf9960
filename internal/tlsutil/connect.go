package tlsutil

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// The Connect CA's side of a Configurator: the CA's roots (SetConnectRoots),
// and on a server its own leaf of the CA (SetConnectServerCertificate).

// connectTrust is what a process knows of the Connect CA: its trust domain
// and every root it lists, active or not (so that a peer keeps working
// through a rotation).
type connectTrust struct {
	trustDomain string
	roots       []*x509.Certificate
	pool        *x509.CertPool
}

// serverLeaf is a server's Connect certificate, with the raw issuer names
// of its chain (which CAs a peer must know to verify it).
type serverLeaf struct {
	cert    *tls.Certificate
	issuers [][]byte
}

// SetConnectRoots hands over the Connect CA's roots, of trust domain td:
// every root the CA lists, active or not, so that peers keep working
// through a rotation. The public ports then accept agent leaves of the CA
// as client certificates, and the server ports Connect server leaves. A
// server calls it whenever the CA's roots change; no roots accepts none.
func (c *Configurator) SetConnectRoots(td string, roots []*x509.Certificate) {
	if len(roots) == 0 || td == "" {
		c.connect.Store(nil)
	} else {
		p := x509.NewCertPool()
		for _, r := range roots {
			p.AddCert(r)
		}
		c.connect.Store(&connectTrust{trustDomain: td, roots: roots, pool: p})
	}
	c.checkConnectReady()
}

// SetConnectServerCertificate makes cert, a leaf of the Connect CA that
// names ServerNames (its chain in Certificate, parsed in Leaf), this
// server's Connect certificate; nil drops it. A server's CA module calls
// it whenever it signs itself a new one.
func (c *Configurator) SetConnectServerCertificate(cert *tls.Certificate) {
	if cert == nil || cert.Leaf == nil {
		c.connectServer.Store(nil)
		c.checkConnectReady()
		return
	}
	leaf := &serverLeaf{cert: cert, issuers: [][]byte{cert.Leaf.RawIssuer}}
	for _, der := range cert.Certificate[1:] {
		if ic, err := x509.ParseCertificate(der); err == nil {
			leaf.issuers = append(leaf.issuers, ic.RawIssuer)
		}
	}
	c.connectServer.Store(leaf)
	c.checkConnectReady()
}

// ConnectServerCertificate is the server's Connect certificate when it
// has one valid now, else nil.
func (c *Configurator) ConnectServerCertificate() *tls.Certificate {
	if l := c.validServerLeaf(); l != nil {
		return l.cert
	}
	return nil
}

func (c *Configurator) validServerLeaf() *serverLeaf {
	l := c.connectServer.Load()
	if l == nil {
		return nil
	}
	if now := c.cfg.Now(); now.Before(l.cert.Leaf.NotBefore) || !now.Before(l.cert.Leaf.NotAfter) {
		return nil
	}
	return l
}

// OnConnectReady calls f whenever this server becomes ready to speak
// Connect on its server ports (it holds a valid Connect leaf and knows
// the CA's roots, where it did not before), after closing its Raft links
// (ServerPort.Track) so that they are opened again with the Connect
// leaf: f gets how many were closed. A server logs it.
func (c *Configurator) OnConnectReady(f func(closed int)) { c.onReady.Store(&f) }

// checkConnectReady closes the Raft links when the server has just
// become ready to speak Connect: links opened before were made with the
// certificate file, and TLS never looks at certificates again on a
// connection that is up.
func (c *Configurator) checkConnectReady() {
	ready := c.validServerLeaf() != nil && c.connect.Load() != nil
	if !c.connectReady.CompareAndSwap(!ready, ready) || !ready {
		return
	}
	closed := c.links.closeOnReady()
	if f := c.onReady.Load(); f != nil {
		(*f)(closed)
	}
}

// Kinds of the certificate a peer of a server port presented.
const (
	// PeerClusterCA is a server certificate of the cluster CA, from
	// -tls-cert-file (or trellis dev's bundle).
	PeerClusterCA = "cluster_ca"
	// PeerConnect is a server leaf of the Connect CA.
	PeerConnect = "connect"
)

// verifyServerPeer checks the certificate a peer of a server port
// presented, for usage (server authentication for a server dialed,
// client authentication for a server dialing in): a server certificate of
// the cluster CA naming ServerName, or a Connect server leaf of this
// trust domain and datacenter chaining to a root the CA lists. With scope
// anyDatacenter, a server certificate of the cluster CA naming the
// server name of one other datacenter passes too, as a server of it. An
// agent's or a service's leaf is refused. It returns the server it
// verified.
func (c *Configurator) verifyServerPeer(certs []*x509.Certificate, usage x509.ExtKeyUsage, scope peerScope) (ServerPeer, error) {
	if len(certs) == 0 {
		return ServerPeer{}, fmt.Errorf("tls: peer refused: it presented no certificate; it needs one of %s", c.ServerName())
	}
	leaf := certs[0]
	m := c.current.Load()
	now := c.cfg.Now()
	clusterErr := verifyLeaf(leaf, certs[1:], m.roots, now, c.ServerName(), []x509.ExtKeyUsage{usage})
	if clusterErr == nil {
		return ServerPeer{Datacenter: c.cfg.Datacenter, Kind: PeerClusterCA}, nil
	}
	if len(leaf.URIs) == 0 {
		if scope == anyDatacenter {
			dc, err := otherServerDatacenter(leaf.DNSNames, c.cfg.Datacenter, c.cfg.Domain)
			if err != nil {
				return ServerPeer{}, fmt.Errorf("tls: peer refused: %w", err)
			}
			if dc != "" {
				if err := verifyLeaf(leaf, certs[1:], m.roots, now, ServerName(dc, c.cfg.Domain), []x509.ExtKeyUsage{usage}); err != nil {
					return ServerPeer{}, fmt.Errorf("tls: peer refused: %w", err)
				}
				return ServerPeer{Datacenter: dc, Kind: PeerClusterCA}, nil
			}
		}
		return ServerPeer{}, fmt.Errorf("tls: peer refused: %w", clusterErr)
	}
	if err := c.verifyConnect(certs, "/server/dc/", "a server", usage); err != nil {
		return ServerPeer{}, fmt.Errorf("tls: peer refused: %w", err)
	}
	return ServerPeer{Datacenter: c.cfg.Datacenter, Kind: PeerConnect}, nil
}

// verifyPublicClient checks a client certificate presented on a public
// port: a client (or server) certificate of the cluster CA, or an agent
// leaf of the Connect CA, whose only URI SAN is an agent's SPIFFE id.
func (c *Configurator) verifyPublicClient(certs []*x509.Certificate) error {
	leaf := certs[0]
	m := c.current.Load()
	clusterErr := verifyLeaf(leaf, certs[1:], m.roots, c.cfg.Now(), "", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth})
	if clusterErr == nil {
		return nil
	}
	if len(leaf.URIs) == 0 {
		return fmt.Errorf("tls: client certificate refused: %w", clusterErr)
	}
	if err := c.verifyConnect(certs, "/agent/client/dc/", "an agent", x509.ExtKeyUsageClientAuth); err != nil {
		return fmt.Errorf("tls: client certificate refused: %w", err)
	}
	return nil
}

// verifyConnect checks a leaf of the Connect CA (verifyConnectLeaf)
// against the roots this process knows.
func (c *Configurator) verifyConnect(certs []*x509.Certificate, kind, what string, usage x509.ExtKeyUsage) error {
	trust := c.connect.Load()
	if trust == nil {
		return errors.New("this server does not know the Connect CA's roots yet")
	}
	return verifyConnectLeaf(certs, trust.trustDomain, trust.pool, c.cfg.Datacenter, kind, what, usage, c.cfg.Now())
}

// verifyConnectLeaf checks a leaf of the Connect CA (with its chain)
// whose one URI SAN is a SPIFFE id of trust domain td with a path
// <kind><dc>/id/<name> (kind "/agent/client/dc/" or "/server/dc/", what
// "an agent" or "a server" says in errors), for usage, against roots.
func verifyConnectLeaf(certs []*x509.Certificate, td string, roots *x509.CertPool, dc, kind, what string, usage x509.ExtKeyUsage, now time.Time) error {
	leaf := certs[0]
	if len(leaf.URIs) != 1 {
		return fmt.Errorf("%q has %d URI SANs; the leaf of %s has one", leaf.Subject.CommonName, len(leaf.URIs), what)
	}
	u := leaf.URIs[0]
	if !isSPIFFEOf(u, kind+dc+"/id/") {
		return fmt.Errorf("%s is not the SPIFFE id of %s of datacenter %s", u, what, dc)
	}
	if u.Host != td {
		return fmt.Errorf("%s is not of the Connect CA's trust domain %s", u, td)
	}
	inter := x509.NewCertPool()
	for _, ic := range certs[1:] {
		inter.AddCert(ic)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return fmt.Errorf("%s is not a leaf of the Connect CA: %v", u, err)
	}
	return nil
}

// isSPIFFEOf reports whether u is spiffe://<host>/<prefix><one segment>,
// with nothing else: no query, fragment, user, port or escaped path.
func isSPIFFEOf(u *url.URL, prefix string) bool {
	if u.Scheme != "spiffe" || u.Opaque != "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.RawPath != "" || u.Port() != "" {
		return false
	}
	name, ok := strings.CutPrefix(u.Path, prefix)
	return ok && name != "" && !strings.Contains(name, "/")
}

// connectCertFor is the server's Connect certificate if it has a valid
// one that a peer which said it knows the CAs acceptable (their DER
// subjects, from its certificate request) can verify; else nil.
func (c *Configurator) connectCertFor(acceptable [][]byte) *tls.Certificate {
	l := c.validServerLeaf()
	if l == nil {
		return nil
	}
	for _, name := range acceptable {
		for _, issuer := range l.issuers {
			if bytes.Equal(name, issuer) {
				return l.cert
			}
		}
	}
	return nil
}

// clientCAs is the pool a server port names in its certificate request:
// the cluster CA and every Connect root it knows, so that a dialing
// server presents its Connect leaf only to a server that can verify it.
func (c *Configurator) clientCAs() *x509.CertPool {
	p := x509.NewCertPool()
	for _, ca := range c.current.Load().cas {
		p.AddCert(ca)
	}
	if t := c.connect.Load(); t != nil {
		for _, r := range t.roots {
			p.AddCert(r)
		}
	}
	return p
}
