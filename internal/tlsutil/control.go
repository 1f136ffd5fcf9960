package tlsutil

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"slices"
)

// IncomingControlConfig is for an agent's TCP control address (trellis
// agent -control-addr), which stops tasks and reads their logs: it serves
// the process's certificate, which must be a control certificate
// (KindControl: ControlName, valid for server authentication) and must
// not be a server certificate of the cluster (an agent holding one could
// join the server ports as a server), and it requires of every client a
// certificate of the cluster CA valid for client authentication.
func (c *Configurator) IncomingControlConfig() (*tls.Config, error) {
	m := c.current.Load()
	if m.cert == nil {
		return nil, ErrNoCertificate
	}
	leaf := m.cert.Leaf
	if !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageServerAuth) {
		return nil, &FileError{Flag: FlagCertFile, Err: fmt.Errorf("%q is not valid for server authentication, which serving the control address needs", leaf.Subject.CommonName)}
	}
	if name := ControlName(c.cfg.Datacenter, c.cfg.Domain); !slices.Contains(leaf.DNSNames, name) {
		return nil, &FileError{Flag: FlagCertFile, Err: fmt.Errorf("%q is not a control certificate: it does not name %s (create one with `trellis tls cert create -control`)", leaf.Subject.CommonName, name)}
	}
	if slices.Contains(leaf.DNSNames, c.ServerName()) {
		return nil, &FileError{Flag: FlagCertFile, Err: fmt.Errorf("%q is a server certificate of the cluster (%s): an agent must not hold one, since the server ports would take it for a server", leaf.Subject.CommonName, c.ServerName())}
	}
	return &tls.Config{
		MinVersion:     tls.VersionTLS13,
		GetCertificate: c.getCertificate,
		ClientAuth:     tls.RequireAnyClientCert,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return c.verifyPeer(cs, x509.ExtKeyUsageClientAuth, "")
		},
	}, nil
}

// OutgoingControlConfig is for a client of an agent's TCP control address
// (`trellis agent leave -control-addr`): the agent must present a control
// certificate of this cluster's CA (ControlName), whatever address it was
// dialed at; the process's own certificate is presented.
func (c *Configurator) OutgoingControlConfig() *tls.Config {
	return c.outgoingTo(ControlName(c.cfg.Datacenter, c.cfg.Domain))
}
