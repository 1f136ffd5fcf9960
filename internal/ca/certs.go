package ca

import (
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"time"

	"trellis.dev/trellis/internal/resource"
)

// Lifetimes and limits of the certificates made here.
const (
	// clockSkew is how far before "now" a certificate becomes valid, so
	// that a peer whose clock is a little behind accepts it at once.
	clockSkew = time.Minute
	// rootMaxPathLen lets two CA certificates stand below a root: the
	// longest chain is leaf → secondary intermediate → cross-signed new
	// root → old root.
	rootMaxPathLen = 2
)

// Signer is the CA material a server signs with: Cert and its Key, and
// Chain, the certificates a TLS peer sends after the leaf, from the one
// that signed the leaf up to but excluding the trusted root. A root that
// signs directly has an empty Chain; a root just rotated in has
// [cross-signed self]; a secondary's intermediate has [intermediate] (and
// the cross-signed primary root after a rotation of the primary).
type Signer struct {
	Cert  *x509.Certificate
	Key   crypto.Signer
	Chain []*x509.Certificate
}

// check refuses a Signer that cannot sign at now.
func (s Signer) check(now time.Time) error {
	switch {
	case s.Cert == nil || s.Key == nil:
		return errors.New("signer: no CA certificate or key")
	case !s.Cert.IsCA:
		return fmt.Errorf("signer: %q is not a CA certificate", s.Cert.Subject.CommonName)
	case !samePublicKey(s.Key.Public(), s.Cert.PublicKey):
		return errors.New("signer: the key is not the certificate's")
	case now.IsZero():
		return errors.New("now: no time given")
	case now.Before(s.Cert.NotBefore):
		return fmt.Errorf("signer: %q is not valid before %s", s.Cert.Subject.CommonName, s.Cert.NotBefore.UTC().Format(time.RFC3339))
	case !now.Before(s.Cert.NotAfter):
		return fmt.Errorf("signer: %q expired at %s", s.Cert.Subject.CommonName, s.Cert.NotAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

// RootOptions describes a new root.
type RootOptions struct {
	TrustDomain string
	KeyType     KeyType       // DefaultKeyType when zero
	TTL         time.Duration // DefaultRootTTL when zero
	Now         time.Time     // required
}

// NewRoot makes a self-signed root CA of a trust domain with a new key.
// Its URI SAN is spiffe://<td> and its SubjectKeyId the key's SHA-256 id,
// which is also the root's id (KeyID).
func NewRoot(o RootOptions) (*x509.Certificate, crypto.Signer, error) {
	if o.KeyType == (KeyType{}) {
		o.KeyType = DefaultKeyType
	}
	if o.TTL == 0 {
		o.TTL = DefaultRootTTL
	}
	if err := CheckTrustDomain(o.TrustDomain); err != nil {
		return nil, nil, fmt.Errorf("trust domain: %w", err)
	}
	if err := o.KeyType.Validate(); err != nil {
		return nil, nil, err
	}
	if o.TTL < 0 {
		return nil, nil, fmt.Errorf("ttl: %v is negative", o.TTL)
	}
	if o.Now.IsZero() {
		return nil, nil, errors.New("now: no time given")
	}
	key, err := GenerateKey(o.KeyType)
	if err != nil {
		return nil, nil, err
	}
	skid, err := keyIDBytes(key.Public())
	if err != nil {
		return nil, nil, err
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		// The key id in the name tells roots apart in any listing and
		// matches the id /v1/ca/roots shows.
		Subject:               pkix.Name{CommonName: "Trellis CA " + formatKeyID(skid[:8])},
		NotBefore:             o.Now.Add(-clockSkew),
		NotAfter:              o.Now.Add(o.TTL),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            rootMaxPathLen,
		SubjectKeyId:          skid,
		AuthorityKeyId:        skid,
		URIs:                  []*url.URL{TrustDomainURI(o.TrustDomain)},
	}
	cert, err := createCert(tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}

// CrossSign makes a certificate for newRoot's subject, key and
// SubjectKeyId, signed by the old root. A leaf of the new root whose
// chain carries it verifies against a pool holding only the old root,
// and, since it names the same subject and key as the new root, against a
// pool holding only the new root too. It is valid no longer than either
// root.
func CrossSign(newRoot *x509.Certificate, old Signer, now time.Time) (*x509.Certificate, error) {
	if err := old.check(now); err != nil {
		return nil, err
	}
	if newRoot == nil || !newRoot.IsCA {
		return nil, errors.New("new root: not a CA certificate")
	}
	if samePublicKey(newRoot.PublicKey, old.Cert.PublicKey) {
		return nil, errors.New("new root: it has the old root's key; a rotation needs a new key")
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               newRoot.Subject,
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              earliest(newRoot.NotAfter, old.Cert.NotAfter),
		KeyUsage:              newRoot.KeyUsage,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            newRoot.MaxPathLen,
		MaxPathLenZero:        newRoot.MaxPathLenZero,
		SubjectKeyId:          newRoot.SubjectKeyId,
		AuthorityKeyId:        old.Cert.SubjectKeyId,
		URIs:                  newRoot.URIs,
	}
	return createCert(tmpl, old.Cert, newRoot.PublicKey, old.Key)
}

// SignLeaf makes the leaf certificate of id for the key of csr, which
// CheckCSR has accepted. The leaf is valid from a minute before now for
// ttl, but never beyond the signer; it serves and dials (server and
// client authentication), names id as its URI SAN and, for a service,
// DNSName as its DNS SAN, and cannot sign certificates. It is made by
// the leaf encoder (leaf.go) and checked as x509.CreateCertificate
// checks what it makes: its signature is verified before it is
// returned. The signing service, which signs by the thousand, uses a
// LeafIssuer and checks a sample instead.
func SignLeaf(csr *x509.CertificateRequest, id Identity, s Signer, ttl time.Duration, now time.Time) (*x509.Certificate, error) {
	if err := s.check(now); err != nil {
		return nil, err
	}
	li, err := NewLeafIssuer(s)
	if err != nil {
		return nil, err
	}
	leaf, err := li.Issue(csr, id, ttl, now)
	if err != nil {
		return nil, err
	}
	return li.Check(leaf)
}

// SignIntermediate makes the signing CA of a secondary datacenter for the
// key of csr: a CA that may sign leaves only (MaxPathLen 0), with the
// trust domain's URI SAN and name constraints that permit URIs of the
// trust domain alone, valid for ttl but never beyond the signer.
func SignIntermediate(csr *x509.CertificateRequest, s Signer, ttl time.Duration, now time.Time) (*x509.Certificate, error) {
	if err := s.check(now); err != nil {
		return nil, err
	}
	if err := checkCSRItself(csr); err != nil {
		return nil, err
	}
	if ttl <= 0 {
		return nil, fmt.Errorf("ttl: %v is not a positive duration", ttl)
	}
	td, err := intermediateTrustDomain(csr, s.Cert)
	if err != nil {
		return nil, err
	}
	skid, err := keyIDBytes(csr.PublicKey)
	if err != nil {
		return nil, err
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "Trellis intermediate CA " + formatKeyID(skid[:8])},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              earliest(now.Add(ttl), s.Cert.NotAfter),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
		SubjectKeyId:          skid,
		AuthorityKeyId:        s.Cert.SubjectKeyId,
		URIs:                  []*url.URL{TrustDomainURI(td)},
		// Name constraints: a secondary's intermediate vouches for URIs
		// of the trust domain alone (a verifier refuses a leaf under it
		// with a URI of any other host). Critical, as RFC 5280 asks.
		PermittedURIDomains:         []string{td},
		PermittedDNSDomainsCritical: true,
	}
	return createCert(tmpl, s.Cert, csr.PublicKey, s.Key)
}

// intermediateTrustDomain is the trust domain an intermediate names: the
// signer's, which a URI SAN the CSR asks for must match. A supplied root
// from an outside PKI may have no SPIFFE URI; then the CSR's own
// spiffe://<td> names it.
func intermediateTrustDomain(csr *x509.CertificateRequest, signer *x509.Certificate) (string, error) {
	var asked string
	switch len(csr.URIs) {
	case 0:
	case 1:
		u := csr.URIs[0]
		if u.Scheme != "spiffe" || u.Path != "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || CheckTrustDomain(u.Host) != nil {
			return "", refuse(ReasonNotSPIFFE, fieldCSRURISAN, "%q is not a trust domain's spiffe://<td>", u.String())
		}
		asked = u.Host
	default:
		return "", refuse(ReasonURISANCount, fieldCSRURISAN, "it has %d URI SANs; an intermediate's CSR has at most one, spiffe://<td>", len(csr.URIs))
	}
	td, err := trustDomainOf(signer)
	switch {
	case err != nil && asked == "":
		return "", fmt.Errorf("signer: %w, and the CSR names no trust domain", err)
	case err != nil:
		return asked, nil
	case asked != "" && asked != td:
		return "", refuse(ReasonTrustDomain, fieldCSRURISAN, "it asks for trust domain %q; the signer's is %q", asked, td)
	}
	return td, nil
}

// trustDomainOf reads the trust domain from a CA certificate's
// spiffe://<td> URI SAN.
func trustDomainOf(c *x509.Certificate) (string, error) {
	for _, u := range c.URIs {
		if u.Scheme == "spiffe" && (u.Path == "" || u.Path == "/") && CheckTrustDomain(u.Host) == nil {
			return u.Host, nil
		}
	}
	return "", fmt.Errorf("%q has no spiffe://<trust-domain> URI SAN", c.Subject.CommonName)
}

// CheckSuppliedRoot reads and checks a root an operator supplies in the
// CAConfig. It refuses, naming root_cert or private_key, PEM that does
// not parse, a certificate that is not a CA or is not valid at now, a key
// type the CA does not use, and a key that is not the certificate's. No
// error quotes the key.
func CheckSuppliedRoot(certPEM, keyPEM []byte, now time.Time) (*x509.Certificate, crypto.Signer, error) {
	const certField, keyField = "root_cert", "private_key"
	certs, err := ParseCerts(certPEM)
	if err != nil {
		return nil, nil, resource.NewFieldError(certField, "%v", err)
	}
	if len(certs) != 1 {
		return nil, nil, resource.NewFieldError(certField, "it holds %d certificates; give only the root", len(certs))
	}
	cert := certs[0]
	name := cert.Subject.CommonName
	switch {
	case !cert.BasicConstraintsValid || !cert.IsCA:
		return nil, nil, resource.NewFieldError(certField, "%q is not a CA certificate (basicConstraints CA is not set)", name)
	case cert.KeyUsage != 0 && cert.KeyUsage&x509.KeyUsageCertSign == 0:
		return nil, nil, resource.NewFieldError(certField, "%q may not sign certificates (its key usage lacks certificate signing)", name)
	case now.Before(cert.NotBefore):
		return nil, nil, resource.NewFieldError(certField, "%q is not valid before %s", name, cert.NotBefore.UTC().Format(time.RFC3339))
	case !now.Before(cert.NotAfter):
		return nil, nil, resource.NewFieldError(certField, "%q expired at %s", name, cert.NotAfter.UTC().Format(time.RFC3339))
	}
	kt, err := KeyTypeOf(cert.PublicKey)
	if err == nil {
		err = kt.Validate()
	}
	if err != nil {
		return nil, nil, resource.NewFieldError(certField, "its key: %v", err)
	}
	key, err := ParseKey(keyPEM)
	if err != nil {
		return nil, nil, resource.NewFieldError(keyField, "%v", err)
	}
	if !samePublicKey(key.Public(), cert.PublicKey) {
		return nil, nil, resource.NewFieldError(keyField, "it is not the key of %q", name)
	}
	return cert, key, nil
}

// VerifyLeaf verifies a PEM leaf followed by its chain as a TLS peer of
// the mesh would: the chain must lead to one of roots at now, for server
// and for client authentication both, and the leaf must carry exactly one
// SPIFFE id.
func VerifyLeaf(leafPEM []byte, roots []*x509.Certificate, now time.Time) error {
	certs, err := ParseCerts(leafPEM)
	if err != nil {
		return fmt.Errorf("leaf: %w", err)
	}
	_, err = VerifyPeer(certs, roots, now)
	return err
}

// VerifyPeer verifies the certificates a TLS peer presented (its leaf
// first) against roots at now, for server and for client authentication,
// and returns the SPIFFE id of the leaf.
func VerifyPeer(certs []*x509.Certificate, roots []*x509.Certificate, now time.Time) (Identity, error) {
	if len(certs) == 0 {
		return nil, errors.New("leaf: no certificate")
	}
	if len(roots) == 0 {
		return nil, errors.New("roots: none given")
	}
	pool := x509.NewCertPool()
	for _, r := range roots {
		pool.AddCert(r)
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	leaf := certs[0]
	// One usage per call: VerifyOptions accepts a chain that allows any
	// of the usages listed, and a mesh leaf must allow both.
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		opts := x509.VerifyOptions{Roots: pool, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{usage}}
		if _, err := leaf.Verify(opts); err != nil {
			return nil, fmt.Errorf("leaf: %w", err)
		}
	}
	if len(leaf.URIs) != 1 {
		return nil, fmt.Errorf("leaf: it has %d URI SANs, not one SPIFFE id", len(leaf.URIs))
	}
	id, err := ParseID(leaf.URIs[0])
	if err != nil {
		return nil, fmt.Errorf("leaf: %w", err)
	}
	return id, nil
}

// createCert signs tmpl with parentKey and parses the result back, so
// that callers get the certificate exactly as a peer will read it.
func createCert(tmpl, parent *x509.Certificate, pub crypto.PublicKey, parentKey crypto.Signer) (*x509.Certificate, error) {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, parentKey)
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(der)
}

// serialLimit is 2^128: serials are drawn below it.
var serialLimit = new(big.Int).Lsh(big.NewInt(1), 128)

// serialFloor is 2^64: a serial below it is drawn again, so every serial
// has at least 64 random bits' worth of magnitude and none is a small
// number a person could mistake for a counter.
var serialFloor = new(big.Int).Lsh(big.NewInt(1), 64)

// randomSerial draws a serial from 128 random bits. RFC 5280 allows 20
// octets, positive; 128 bits encode in at most 17 with the sign octet.
func randomSerial() (*big.Int, error) {
	for {
		n, err := rand.Int(rand.Reader, serialLimit)
		if err != nil {
			return nil, err
		}
		if n.Cmp(serialFloor) >= 0 {
			return n, nil
		}
	}
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
