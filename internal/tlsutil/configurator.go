package tlsutil

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// The flags whose files a Config names; errors name them so that an
// operator knows which file to fix.
const (
	FlagCAFile   = "-tls-ca-file"
	FlagCertFile = "-tls-cert-file"
	FlagKeyFile  = "-tls-key-file"
)

// Config names the TLS files of a process and what its certificate must be.
type Config struct {
	CAFile   string // PEM: the cluster CA's certificate(s)
	CertFile string // PEM: this process's certificate, then any intermediates
	KeyFile  string // PEM: its private key

	// Server requires a server certificate of Datacenter (a process that
	// serves the server-to-server port); otherwise the certificate is
	// optional and, when given, must be valid for client authentication.
	Server     bool
	Datacenter string // DefaultDatacenter when empty
	Domain     string // DefaultDomain when empty

	// Now is the clock certificates are checked against; time.Now when
	// nil. Tests set it.
	Now func() time.Time
}

// Enabled reports whether any TLS file is named: a process without them
// runs in plaintext.
func (c Config) Enabled() bool { return c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" }

// FileError is a TLS file that was refused: its flag, its path and why.
type FileError struct {
	Flag, Path string
	Err        error
}

func (e *FileError) Error() string {
	if e.Path == "" {
		return e.Flag + ": " + e.Err.Error()
	}
	return e.Flag + " " + e.Path + ": " + e.Err.Error()
}

func (e *FileError) Unwrap() error { return e.Err }

// ErrNoCertificate is returned for a server-side or server-to-server
// tls.Config of a Configurator that holds no certificate.
var ErrNoCertificate = errors.New("no certificate: give -tls-cert-file and -tls-key-file")

// material is one consistent load of the files, swapped whole on reload.
type material struct {
	roots *x509.CertPool
	cas   []*x509.Certificate // what roots holds
	cert  *tls.Certificate    // nil when none was given
}

// Configurator holds the current TLS material of a process and builds
// every tls.Config from it. Its tls.Configs read the material at each
// handshake, so Reload takes effect on the next connection without
// restarting a listener.
type Configurator struct {
	cfg     Config
	current atomic.Pointer[material]
	// static is set for material given in memory (dev): there are no
	// files to reload.
	static bool
	// connect is what the process knows of the Connect CA, whose agent
	// leaves the public ports accept as client certificates and whose
	// server leaves the server ports accept (SetConnectRoots); nil until
	// a server sets it.
	connect atomic.Pointer[connectTrust]
	// connectServer is this server's leaf of the Connect CA
	// (SetConnectServerCertificate); nil until the server has one.
	connectServer atomic.Pointer[serverLeaf]
	// connectReady: the server holds a valid Connect leaf and knows the
	// roots (checkConnectReady); onReady is called when it becomes so.
	connectReady atomic.Bool
	onReady      atomic.Pointer[func(closed int)]
	// links are the live connections of the server ports (ServerPort).
	links *Links
}

// New loads and checks the files of cfg. It refuses a missing or
// unreadable file, a key that does not match its certificate, a
// certificate that does not chain to the CA, and, for a server, a
// certificate that is not a server certificate of its datacenter; each
// error is a *FileError naming the flag.
func New(cfg Config) (*Configurator, error) {
	cfg = withDefaults(cfg)
	if err := CheckDatacenter(cfg.Datacenter); err != nil {
		return nil, fmt.Errorf("datacenter: %w", err)
	}
	if err := CheckDomain(cfg.Domain); err != nil {
		return nil, fmt.Errorf("domain: %w", err)
	}
	c := &Configurator{cfg: cfg, links: newLinks()}
	m, err := c.load()
	if err != nil {
		return nil, err
	}
	c.current.Store(m)
	return c, nil
}

// NewFromBundle is the Configurator of `trellis dev`: the server
// certificate of an in-memory DevBundle, trusted through its CA. Reload
// does nothing.
func NewFromBundle(b *DevBundle) (*Configurator, error) {
	cfg := withDefaults(Config{Server: true, Datacenter: b.Datacenter, Domain: b.Domain})
	m, err := parseMaterial(cfg, b.CA.CertPEM, b.Server.CertPEM, b.Server.KeyPEM)
	if err != nil {
		return nil, err
	}
	c := &Configurator{cfg: cfg, static: true, links: newLinks()}
	c.current.Store(m)
	return c, nil
}

func withDefaults(cfg Config) Config {
	if cfg.Datacenter == "" {
		cfg.Datacenter = DefaultDatacenter
	}
	if cfg.Domain == "" {
		cfg.Domain = DefaultDomain
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return cfg
}

// FromFiles reports whether c was loaded from files, which Reload reads
// again; false for a dev bundle, which has nothing to reload.
func (c *Configurator) FromFiles() bool { return !c.static }

// Reload reads the files again and, if they pass every check New makes,
// uses them from the next handshake on. On an error the material loaded
// before stays in use, and the error says which file was refused.
func (c *Configurator) Reload() error {
	if c.static {
		return nil
	}
	m, err := c.load()
	if err != nil {
		return err
	}
	c.current.Store(m)
	return nil
}

// Certificate is the certificate in use (nil when none was given), for
// logging its serial and expiry.
func (c *Configurator) Certificate() *x509.Certificate {
	if m := c.current.Load(); m.cert != nil {
		return m.cert.Leaf
	}
	return nil
}

// ServerName is the name a server of this cluster's datacenter presents.
func (c *Configurator) ServerName() string { return ServerName(c.cfg.Datacenter, c.cfg.Domain) }

// ConnectServerName is the name a client asks for to be served a
// server's Connect CA leaf (see the package function).
func (c *Configurator) ConnectServerName() string {
	return ConnectServerName(c.cfg.Datacenter, c.cfg.Domain)
}

// ServerNames are the DNS names a server's Connect CA leaf carries: the
// name peers check a server by, and the Connect name clients ask for.
func (c *Configurator) ServerNames() []string {
	return []string{c.ServerName(), c.ConnectServerName()}
}

func (c *Configurator) load() (*material, error) {
	cfg := c.cfg
	if cfg.CAFile == "" {
		return nil, &FileError{Flag: FlagCAFile, Err: errors.New("required: name the cluster CA's certificate (created by `trellis tls ca create`)")}
	}
	switch {
	case cfg.Server && cfg.CertFile == "":
		return nil, &FileError{Flag: FlagCertFile, Err: errors.New("required on a server: name its server certificate (created by `trellis tls cert create -server`)")}
	case cfg.CertFile != "" && cfg.KeyFile == "":
		return nil, &FileError{Flag: FlagKeyFile, Err: errors.New("required with " + FlagCertFile + ": name the certificate's private key")}
	case cfg.KeyFile != "" && cfg.CertFile == "":
		return nil, &FileError{Flag: FlagCertFile, Err: errors.New("required with " + FlagKeyFile + ": name the key's certificate")}
	}
	read := func(flag, path string) ([]byte, error) {
		if path == "" {
			return nil, nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			// The path is in the FileError already; keep only the reason.
			var pe *os.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return nil, &FileError{Flag: flag, Path: path, Err: err}
		}
		return b, nil
	}
	caPEM, err := read(FlagCAFile, cfg.CAFile)
	if err != nil {
		return nil, err
	}
	certPEM, err := read(FlagCertFile, cfg.CertFile)
	if err != nil {
		return nil, err
	}
	keyPEM, err := read(FlagKeyFile, cfg.KeyFile)
	if err != nil {
		return nil, err
	}
	m, err := parseMaterial(cfg, caPEM, certPEM, keyPEM)
	if err != nil {
		var fe *FileError
		if errors.As(err, &fe) {
			fe.Path = map[string]string{FlagCAFile: cfg.CAFile, FlagCertFile: cfg.CertFile, FlagKeyFile: cfg.KeyFile}[fe.Flag]
		}
		return nil, err
	}
	return m, nil
}

// parseMaterial checks the contents of the three files against each other
// and against cfg. certPEM and keyPEM may both be nil (no certificate).
func parseMaterial(cfg Config, caPEM, certPEM, keyPEM []byte) (*material, error) {
	cas, err := parseCerts(caPEM)
	if err != nil {
		return nil, &FileError{Flag: FlagCAFile, Err: err}
	}
	roots := x509.NewCertPool()
	for _, ca := range cas {
		if !ca.IsCA {
			return nil, &FileError{Flag: FlagCAFile, Err: fmt.Errorf("%q is not a CA certificate (it may be a server's or a client's)", ca.Subject.CommonName)}
		}
		roots.AddCert(ca)
	}
	m := &material{roots: roots, cas: cas}
	if certPEM == nil && keyPEM == nil {
		return m, nil
	}

	chain, err := parseCerts(certPEM)
	if err != nil {
		return nil, &FileError{Flag: FlagCertFile, Err: err}
	}
	if _, err := parseKey(keyPEM); err != nil {
		return nil, &FileError{Flag: FlagKeyFile, Err: err}
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, &FileError{Flag: FlagKeyFile, Err: fmt.Errorf("it is not the key of the certificate in %s (%v)", FlagCertFile, err)}
	}
	leaf := chain[0]
	pair.Leaf = leaf
	if leaf.IsCA {
		return nil, &FileError{Flag: FlagCertFile, Err: fmt.Errorf("%q is a CA certificate: give a server or client certificate signed by it", leaf.Subject.CommonName)}
	}

	usages := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if cfg.Server {
		// A server serves with its certificate and dials other servers
		// with the same one.
		usages = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	}
	if err := verifyLeaf(leaf, chain[1:], roots, cfg.Now(), "", usages); err != nil {
		return nil, &FileError{Flag: FlagCertFile, Err: err}
	}
	if cfg.Server {
		want := ServerName(cfg.Datacenter, cfg.Domain)
		if !slices.Contains(leaf.DNSNames, want) {
			return nil, &FileError{Flag: FlagCertFile, Err: fmt.Errorf(
				"not a server certificate of datacenter %q: it names [%s], a server's names %s (create one with `trellis tls cert create -server -dc %s`)",
				cfg.Datacenter, strings.Join(leaf.DNSNames, ", "), want, cfg.Datacenter)}
		}
	}
	m.cert = &pair
	return m, nil
}

// verifyLeaf checks that leaf chains to roots at now, is valid for every
// one of usages, and, when name is set, names it. Its errors say what is
// wrong in an operator's words.
func verifyLeaf(leaf *x509.Certificate, intermediates []*x509.Certificate, roots *x509.CertPool, now time.Time, name string, usages []x509.ExtKeyUsage) error {
	inter := x509.NewCertPool()
	for _, c := range intermediates {
		inter.AddCert(c)
	}
	for _, u := range usages {
		// VerifyOptions.KeyUsages accepts a chain valid for any one of
		// them; each is required here, so each is checked alone.
		_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{u}})
		if err == nil {
			continue
		}
		var unknown x509.UnknownAuthorityError
		var invalid x509.CertificateInvalidError
		switch {
		case errors.As(err, &unknown):
			return fmt.Errorf("%q is not signed by the cluster CA (%s)", leaf.Subject.CommonName, FlagCAFile)
		case errors.As(err, &invalid) && invalid.Reason == x509.IncompatibleUsage:
			return fmt.Errorf("%q is not valid for %s", leaf.Subject.CommonName, usageName(u))
		case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
			// The expired one may be the CA rather than the leaf.
			c := invalid.Cert
			return fmt.Errorf("%q is valid only from %s to %s, and it is %s", c.Subject.CommonName,
				c.NotBefore.UTC().Format(time.RFC3339), c.NotAfter.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
		default:
			return err
		}
	}
	if name != "" && !slices.Contains(leaf.DNSNames, name) {
		return fmt.Errorf("%q is not a certificate of %s: it names [%s]", leaf.Subject.CommonName, name, strings.Join(leaf.DNSNames, ", "))
	}
	return nil
}

func usageName(u x509.ExtKeyUsage) string {
	switch u {
	case x509.ExtKeyUsageServerAuth:
		return "server authentication"
	case x509.ExtKeyUsageClientAuth:
		return "client authentication"
	}
	return fmt.Sprintf("extended key usage %d", u)
}
