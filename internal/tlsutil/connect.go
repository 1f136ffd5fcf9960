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
// through a rotation), and the CAs that sign this datacenter's leaves.
type connectTrust struct {
	trustDomain string
	roots       []*x509.Certificate
	pool        *x509.CertPool
	// signers are the certificates of the CAs that sign this
	// datacenter's leaves: a server leaf is taken on a server port only
	// when one of them signed it (IssuedByOneOf).
	signers []*x509.Certificate
}

// serverLeaf is a server's Connect certificate, with the raw name of its
// issuer (the CA a peer must take server leaves of to accept it).
type serverLeaf struct {
	cert    *tls.Certificate
	issuers [][]byte
}

// SetConnectRoots hands over the Connect CA's roots, of trust domain td:
// every root the CA lists, active or not, so that peers keep working
// through a rotation; and signers, the certificates of the CAs that sign
// this datacenter's leaves (the primary's roots themselves, a secondary's
// own intermediate: ca.DatacenterSigners). The public ports then accept
// agent leaves of the CA as client certificates, and the server ports
// Connect server leaves of this datacenter signed by one of signers,
// never by another datacenter's intermediate. A server calls it whenever
// the CA's roots change; no roots accepts none.
func (c *Configurator) SetConnectRoots(td string, roots, signers []*x509.Certificate) {
	if len(roots) == 0 || td == "" {
		c.connect.Store(nil)
	} else {
		p := x509.NewCertPool()
		for _, r := range roots {
			p.AddCert(r)
		}
		c.connect.Store(&connectTrust{trustDomain: td, roots: roots, pool: p, signers: signers})
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
	// The server ports take a leaf by its direct issuer (a CA of their
	// datacenter), and name those CAs in their certificate requests.
	leaf := &serverLeaf{cert: cert, issuers: [][]byte{cert.Leaf.RawIssuer}}
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
	if err := c.verifyConnectServer(certs, usage); err != nil {
		return ServerPeer{}, fmt.Errorf("tls: peer refused: %w", err)
	}
	return ServerPeer{Datacenter: c.cfg.Datacenter, Kind: PeerConnect}, nil
}

// verifyConnectServer checks a Connect server leaf presented on a server
// port: a server of this trust domain and datacenter (verifyConnectLeaf),
// signed by a CA of this datacenter (IssuedByOneOf the signers), so that
// no other datacenter's intermediate, nor any CA certificate that merely
// chains to a root, can make a server of this one.
func (c *Configurator) verifyConnectServer(certs []*x509.Certificate, usage x509.ExtKeyUsage) error {
	trust := c.connect.Load()
	if trust == nil {
		return errors.New("this server does not know the Connect CA's roots yet")
	}
	chains, err := verifyConnectLeafChains(certs, trust.trustDomain, trust.pool, c.cfg.Datacenter, "/server/dc/", "a server", usage, c.cfg.Now())
	if err != nil {
		return err
	}
	if !IssuedByOneOf(chains, trust.signers) {
		return fmt.Errorf("%s is not signed by a CA of datacenter %s (its issuer is %q): a server leaf of this datacenter is signed by this datacenter's own CA",
			certs[0].URIs[0], c.cfg.Datacenter, certs[0].Issuer.CommonName)
	}
	return nil
}

// IssuedByOneOf reports whether the leaf of the verified chains was
// signed by one of signers: whether the certificate after it in a chain
// (its issuer, whose key checked its signature) holds the key of one of
// them. Keys, not certificates, are compared, so that a signer renewed or
// cross-signed with the same key is still itself.
func IssuedByOneOf(chains [][]*x509.Certificate, signers []*x509.Certificate) bool {
	for _, ch := range chains {
		if len(ch) < 2 {
			continue
		}
		for _, s := range signers {
			if bytes.Equal(ch[1].RawSubjectPublicKeyInfo, s.RawSubjectPublicKeyInfo) {
				return true
			}
		}
	}
	return false
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
	_, err := verifyConnectLeafChains(certs, td, roots, dc, kind, what, usage, now)
	return err
}

// verifyConnectLeafChains is verifyConnectLeaf, returning the chains it
// verified.
func verifyConnectLeafChains(certs []*x509.Certificate, td string, roots *x509.CertPool, dc, kind, what string, usage x509.ExtKeyUsage, now time.Time) ([][]*x509.Certificate, error) {
	leaf := certs[0]
	if len(leaf.URIs) != 1 {
		return nil, fmt.Errorf("%q has %d URI SANs; the leaf of %s has one", leaf.Subject.CommonName, len(leaf.URIs), what)
	}
	u := leaf.URIs[0]
	if !isSPIFFEOf(u, kind+dc+"/id/") {
		return nil, fmt.Errorf("%s is not the SPIFFE id of %s of datacenter %s", u, what, dc)
	}
	if u.Host != td {
		return nil, fmt.Errorf("%s is not of the Connect CA's trust domain %s", u, td)
	}
	inter := x509.NewCertPool()
	for _, ic := range certs[1:] {
		inter.AddCert(ic)
	}
	chains, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{usage}})
	if err != nil {
		return nil, fmt.Errorf("%s is not a leaf of the Connect CA: %v", u, err)
	}
	return chains, nil
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
// the cluster CA and the CAs that sign this datacenter's Connect leaves,
// so that a dialing server presents its Connect leaf only to a server
// that takes it (one whose leaf another CA signed, as during the moment
// after a secondary's intermediate is renewed, presents its file).
func (c *Configurator) clientCAs() *x509.CertPool {
	p := x509.NewCertPool()
	for _, ca := range c.current.Load().cas {
		p.AddCert(ca)
	}
	if t := c.connect.Load(); t != nil {
		for _, s := range t.signers {
			p.AddCert(s)
		}
	}
	return p
}
