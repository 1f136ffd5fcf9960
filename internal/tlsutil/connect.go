package tlsutil

import (
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
)

// SetConnectRoots makes the public ports accept, as client certificates,
// agent leaves of the Connect CA whose roots are roots (every root the CA
// lists, active or not, so that an agent keeps working through a
// rotation). A server calls it whenever the CA's roots change; nil or
// empty accepts none.
func (c *Configurator) SetConnectRoots(roots []*x509.Certificate) {
	if len(roots) == 0 {
		c.connectRoots.Store(nil)
		return
	}
	p := x509.NewCertPool()
	for _, r := range roots {
		p.AddCert(r)
	}
	c.connectRoots.Store(p)
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
	if err := c.verifyConnectAgent(certs); err != nil {
		return fmt.Errorf("tls: client certificate refused: %w", err)
	}
	return nil
}

// verifyConnectAgent checks an agent leaf of the Connect CA.
func (c *Configurator) verifyConnectAgent(certs []*x509.Certificate) error {
	leaf := certs[0]
	if len(leaf.URIs) != 1 {
		return fmt.Errorf("%q has %d URI SANs; an agent's leaf has one", leaf.Subject.CommonName, len(leaf.URIs))
	}
	u := leaf.URIs[0]
	if u.Scheme != "spiffe" || !strings.HasPrefix(u.Path, "/agent/client/dc/"+c.cfg.Datacenter+"/id/") {
		return fmt.Errorf("%s is not the SPIFFE id of an agent of datacenter %s", u, c.cfg.Datacenter)
	}
	roots := c.connectRoots.Load()
	if roots == nil {
		return errors.New("this server does not know the Connect CA's roots yet")
	}
	inter := x509.NewCertPool()
	for _, ic := range certs[1:] {
		inter.AddCert(ic)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: c.cfg.Now(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return fmt.Errorf("%s is not a leaf of the Connect CA: %v", u, err)
	}
	return nil
}
