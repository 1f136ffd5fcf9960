package tlsutil

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// Default lifetimes, in days: Consul's, which operators already plan
// rotations around.
const (
	DefaultCADays   = 5 * 365
	DefaultCertDays = 365
)

// backdate is how far before "now" a certificate becomes valid, so that a
// peer whose clock is a little behind accepts a certificate created a
// moment ago.
const backdate = time.Minute

// KeyPair is a certificate with its private key, parsed and in PEM.
type KeyPair struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
	KeyPEM  []byte
}

// Kind says what a leaf certificate is for.
type Kind int

const (
	// KindServer is a server's certificate: it serves the public ports
	// and the server-to-server port, and dials other servers with it.
	KindServer Kind = iota + 1
	// KindClient is an agent's or a CLI's certificate: it can only
	// identify its holder to a server.
	KindClient
	// KindControl is an agent's control certificate: it serves the
	// agent's TCP control address (-control-addr) and names
	// control.<dc>.<domain>, never server.<dc>.<domain>, so the server
	// ports refuse it.
	KindControl
)

func (k Kind) String() string {
	switch k {
	case KindServer:
		return "server"
	case KindClient:
		return "client"
	case KindControl:
		return "control"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// CAOptions describes a cluster CA.
type CAOptions struct {
	Domain string // DefaultDomain when empty
	Days   int    // DefaultCADays when zero
	// NameConstraint limits the DNS names the CA may sign to Domain,
	// localhost and AdditionalConstraints, so that its key, if stolen,
	// cannot mint a certificate for any other site a client trusts it for.
	NameConstraint        bool
	AdditionalConstraints []string
	Now                   time.Time // time.Now() when zero
}

// CertOptions describes a leaf certificate.
type CertOptions struct {
	Kind       Kind
	Datacenter string // DefaultDatacenter when empty
	Domain     string // DefaultDomain when empty
	Days       int    // DefaultCertDays when zero
	DNSNames   []string
	IPs        []net.IP
	Now        time.Time // time.Now() when zero
}

// GenerateCA creates a self-signed ECDSA P-256 CA.
func GenerateCA(opts CAOptions) (*KeyPair, error) {
	if opts.Domain == "" {
		opts.Domain = DefaultDomain
	}
	if opts.Days == 0 {
		opts.Days = DefaultCADays
	}
	if opts.Now.IsZero() {
		opts.Now = time.Now()
	}
	if err := CheckDomain(opts.Domain); err != nil {
		return nil, fmt.Errorf("domain: %w", err)
	}
	if opts.Days < 0 {
		return nil, fmt.Errorf("days: %d is not a positive number of days", opts.Days)
	}
	for _, c := range opts.AdditionalConstraints {
		if err := CheckDNSName(c); err != nil {
			return nil, fmt.Errorf("additional name constraint: %w", err)
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		// The serial in the name tells two CAs of the same domain apart
		// in a browser's or openssl's listing.
		Subject:               pkix.Name{CommonName: fmt.Sprintf("Trellis CA %s %s", opts.Domain, serial.Text(16)[:8])},
		NotBefore:             opts.Now.Add(-backdate),
		NotAfter:              opts.Now.Add(time.Duration(opts.Days) * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	if opts.NameConstraint {
		tmpl.PermittedDNSDomainsCritical = true
		tmpl.PermittedDNSDomains = append([]string{opts.Domain, "localhost"}, opts.AdditionalConstraints...)
	}
	return sign(tmpl, tmpl, key, key)
}

// GenerateCert creates a leaf certificate signed by ca.
//
// A server certificate names ServerName(dc, domain), localhost and
// 127.0.0.1, and is valid for both server and client authentication: a
// server presents it when it serves and when it dials another server. A
// client certificate names ClientName(dc, domain) and is valid for client
// authentication only, so that it cannot serve as a server's.
func GenerateCert(ca *KeyPair, opts CertOptions) (*KeyPair, error) {
	if opts.Datacenter == "" {
		opts.Datacenter = DefaultDatacenter
	}
	if opts.Domain == "" {
		opts.Domain = DefaultDomain
	}
	if opts.Days == 0 {
		opts.Days = DefaultCertDays
	}
	if opts.Now.IsZero() {
		opts.Now = time.Now()
	}
	if err := CheckDatacenter(opts.Datacenter); err != nil {
		return nil, fmt.Errorf("datacenter: %w", err)
	}
	if err := CheckDomain(opts.Domain); err != nil {
		return nil, fmt.Errorf("domain: %w", err)
	}
	if opts.Days < 0 {
		return nil, fmt.Errorf("days: %d is not a positive number of days", opts.Days)
	}
	for _, n := range opts.DNSNames {
		if err := CheckDNSName(n); err != nil {
			return nil, fmt.Errorf("additional DNS name: %w", err)
		}
	}
	if ca == nil || ca.Cert == nil || ca.Key == nil {
		return nil, errors.New("ca: no CA certificate and key")
	}
	if !ca.Cert.IsCA {
		return nil, fmt.Errorf("ca: %q is not a CA certificate", ca.Cert.Subject.CommonName)
	}
	if max := MaxDays(ca.Cert, opts.Now); opts.Days > max {
		// The certificate would stop verifying when the CA expires, long
		// before the date it shows: refuse rather than mislead.
		return nil, fmt.Errorf("days: %d days outlives the CA, which expires on %s; give at most %d",
			opts.Days, ca.Cert.NotAfter.UTC().Format(time.DateOnly), max)
	}
	notAfter := opts.Now.Add(time.Duration(opts.Days) * 24 * time.Hour)

	tmpl := &x509.Certificate{
		NotBefore:             opts.Now.Add(-backdate),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	switch opts.Kind {
	case KindServer:
		name := ServerName(opts.Datacenter, opts.Domain)
		tmpl.Subject = pkix.Name{CommonName: name}
		tmpl.DNSNames = dedupe(append([]string{name, "localhost"}, opts.DNSNames...))
		tmpl.IPAddresses = append([]net.IP{net.IPv4(127, 0, 0, 1)}, opts.IPs...)
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	case KindClient:
		name := ClientName(opts.Datacenter, opts.Domain)
		tmpl.Subject = pkix.Name{CommonName: name}
		tmpl.DNSNames = dedupe(append([]string{name}, opts.DNSNames...))
		tmpl.IPAddresses = opts.IPs
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	case KindControl:
		name := ControlName(opts.Datacenter, opts.Domain)
		tmpl.Subject = pkix.Name{CommonName: name}
		tmpl.DNSNames = dedupe(append([]string{name}, opts.DNSNames...))
		tmpl.IPAddresses = opts.IPs
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	default:
		return nil, fmt.Errorf("kind: %v is neither server, client nor control", opts.Kind)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	kp, err := sign(tmpl, ca.Cert, key, ca.Key)
	if err != nil {
		return nil, err
	}
	// Verify what was made, as a peer will: a name outside the CA's name
	// constraints is refused here, not at the first handshake.
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	if _, err := kp.Cert.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: opts.Now, KeyUsages: kp.Cert.ExtKeyUsage}); err != nil {
		return nil, fmt.Errorf("the CA cannot sign this certificate: %w", err)
	}
	return kp, nil
}

// MaxDays is the longest life in whole days a certificate signed by ca at
// now may have without outliving it.
func MaxDays(ca *x509.Certificate, now time.Time) int {
	return int(ca.NotAfter.Sub(now) / (24 * time.Hour))
}

// DevBundle is the TLS material of `trellis dev`: a CA, a server
// certificate and a client certificate, all in memory.
type DevBundle struct {
	CA, Server, Client *KeyPair
	Datacenter, Domain string
}

// NewDevBundle creates a fresh CA with a server and a client certificate of
// datacenter dc (DefaultDatacenter when empty), valid for a day: a dev
// process lives for a session and makes new ones at every start, so
// nothing long-lived exists to leak.
func NewDevBundle(dc string, now time.Time) (*DevBundle, error) {
	if dc == "" {
		dc = DefaultDatacenter
	}
	if now.IsZero() {
		now = time.Now()
	}
	ca, err := GenerateCA(CAOptions{Days: 2, NameConstraint: true, Now: now})
	if err != nil {
		return nil, err
	}
	b := &DevBundle{CA: ca, Datacenter: dc, Domain: DefaultDomain}
	if b.Server, err = GenerateCert(ca, CertOptions{Kind: KindServer, Datacenter: dc, Days: 1, Now: now}); err != nil {
		return nil, err
	}
	if b.Client, err = GenerateCert(ca, CertOptions{Kind: KindClient, Datacenter: dc, Days: 1, Now: now}); err != nil {
		return nil, err
	}
	return b, nil
}

// ParseCA reads a CA certificate and its private key from PEM, as written
// by GenerateCA, and checks that they belong together.
func ParseCA(certPEM, keyPEM []byte) (*KeyPair, error) {
	certs, err := parseCerts(certPEM)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	cert := certs[0]
	if !cert.IsCA {
		return nil, fmt.Errorf("CA certificate: %q is not a CA certificate", cert.Subject.CommonName)
	}
	signer, err := parseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	key, ok := signer.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("CA key: a %T, not an ECDSA key", signer)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, errors.New("CA key: it does not match the CA certificate")
	}
	return &KeyPair{Cert: cert, Key: key, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

func sign(tmpl, parent *x509.Certificate, key *ecdsa.PrivateKey, parentKey crypto.Signer) (*KeyPair, error) {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), parentKey)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &KeyPair{
		Cert:    cert,
		Key:     key,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// randomSerial is 127 random bits: unguessable, as the CA/Browser Forum
// asks (at least 64), and positive, as RFC 5280 asks.
func randomSerial() (*big.Int, error) {
	limit := new(big.Int).Lsh(big.NewInt(1), 127)
	for {
		n, err := rand.Int(rand.Reader, limit)
		if err != nil {
			return nil, err
		}
		if n.Sign() > 0 {
			return n, nil
		}
	}
}

// parseCerts reads every CERTIFICATE block of a PEM file, in order.
func parseCerts(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("no PEM CERTIFICATE block in it")
	}
	return certs, nil
}

// parseKey reads the first private key block of a PEM file: PKCS #8, SEC 1
// ("EC PRIVATE KEY") or PKCS #1.
func parseKey(data []byte) (crypto.Signer, error) {
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return nil, errors.New("no PEM private key block in it")
		}
		var (
			k   any
			err error
		)
		switch block.Type {
		case "PRIVATE KEY":
			k, err = x509.ParsePKCS8PrivateKey(block.Bytes)
		case "EC PRIVATE KEY":
			k, err = x509.ParseECPrivateKey(block.Bytes)
		case "RSA PRIVATE KEY":
			k, err = x509.ParsePKCS1PrivateKey(block.Bytes)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", block.Type, err)
		}
		s, ok := k.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("a %T cannot sign", k)
		}
		return s, nil
	}
}

func dedupe(names []string) []string {
	seen := make(map[string]bool, len(names))
	out := names[:0]
	for _, n := range names {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}
