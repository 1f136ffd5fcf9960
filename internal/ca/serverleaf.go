package ca

import (
	"crypto"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"trellis.dev/trellis/internal/resource"
)

// SignServerLeaf makes the leaf certificate of server id for the public
// key pub, signed by s: what a server presents to other servers and to
// agents once the Connect CA is up. It is a leaf as SignLeaf makes them
// (valid from a minute before now for ttl but never beyond the signer,
// server and client authentication, CA false) naming id as its URI SAN
// and dnsNames as its DNS SANs: the names a server is checked by
// (tlsutil's ServerName and ConnectServerName).
//
// Only a server calls it, for itself, with the signing key it holds: no
// CSR travels and none is checked, which is why the signing service,
// which signs what others ask for, refuses every server id
// (ReasonServerID). A server leaf is one certificate per server every
// few days, so it is made with crypto/x509 and checked by it, apart from
// the leaf encoder of the signing service.
func SignServerLeaf(pub crypto.PublicKey, id ServerID, dnsNames []string, s Signer, ttl time.Duration, now time.Time) (*x509.Certificate, error) {
	if err := s.check(now); err != nil {
		return nil, err
	}
	if pub == nil {
		return nil, errors.New("key: none given")
	}
	kt, err := KeyTypeOf(pub)
	if err != nil {
		return nil, fmt.Errorf("key: %w", err)
	}
	if err := checkLeafKeyType(kt); err != nil {
		var r *Refusal
		if errors.As(err, &r) {
			return nil, fmt.Errorf("key: %s", r.Message)
		}
		return nil, fmt.Errorf("key: %w", err)
	}
	if err := id.Check(); err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	if len(dnsNames) == 0 {
		return nil, errors.New("dns names: none given; a server's leaf names what peers check a server by")
	}
	for _, n := range dnsNames {
		if err := checkDNSName(n); err != nil {
			return nil, fmt.Errorf("dns names: %q: %w", n, err)
		}
	}
	if ttl <= 0 {
		return nil, fmt.Errorf("ttl: %v is not a positive duration", ttl)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: id.Server},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              earliest(now.Add(ttl), s.Cert.NotAfter),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  false,
		AuthorityKeyId:        s.Cert.SubjectKeyId,
		URIs:                  []*url.URL{id.URI()},
		DNSNames:              append([]string(nil), dnsNames...),
	}
	return createCert(tmpl, s.Cert, pub, s.Key)
}

// checkDNSName refuses a name that is not lower-case DNS labels joined by
// dots.
func checkDNSName(name string) error {
	if name == "" || len(name) > 253 {
		return errors.New("not a DNS name of 1 to 253 characters")
	}
	for _, label := range strings.Split(name, ".") {
		if !resource.IsDNSLabel(label) {
			return fmt.Errorf("label %q is not a lower-case DNS label", label)
		}
	}
	return nil
}
