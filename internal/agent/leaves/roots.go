package leaves

import (
	"crypto/x509"
	pbca "trellis.dev/trellis/api/ca/v1"
)

// Roots is what the servers say of the Connect CA's roots: the trust
// domain, the active root's id and every root listed (active or not).
type Roots struct {
	TrustDomain string
	ActiveID    string
	Certs       []*x509.Certificate
	// Active is the active root's certificate (nil when none is).
	Active *x509.Certificate
	// Stored are the roots as the servers store them, with their
	// signing certificates: which CAs sign a datacenter's server leaves
	// (ca.DatacenterSigners).
	Stored []*pbca.CARoot
}

// Pool is a pool of every root.
func (r Roots) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range r.Certs {
		p.AddCert(c)
	}
	return p
}

// signedByActive reports whether leaf, with the chain its peers get,
// verifies against the active root alone: a leaf the servers signed
// under the active root.
func (r Roots) signedByActive(leaf *x509.Certificate, chain []*x509.Certificate) bool {
	if r.Active == nil {
		return false
	}
	roots := x509.NewCertPool()
	roots.AddCert(r.Active)
	inter := x509.NewCertPool()
	for _, c := range chain {
		inter.AddCert(c)
	}
	_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	return err == nil
}
