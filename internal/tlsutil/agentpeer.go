package tlsutil

import (
	"crypto/x509"
	"errors"
	"strings"
)

// ConnectAgent returns the instance whose agent certs name, when they are
// an agent leaf of the Connect CA of this datacenter
// (spiffe://<td>/agent/client/dc/<dc>/id/<instance>) that verifies now
// against the roots this server knows: the check the public port's
// handshake made, made again so that a client certificate of the cluster
// CA, which the handshake also takes, never passes for an agent. certs
// are a connection's PeerCertificates, the leaf first.
func (c *Configurator) ConnectAgent(certs []*x509.Certificate) (string, error) {
	if len(certs) == 0 {
		return "", errors.New("no certificate presented")
	}
	const kind = "/agent/client/dc/"
	if err := c.verifyConnect(certs, kind, "an agent", x509.ExtKeyUsageClientAuth); err != nil {
		return "", err
	}
	// verifyConnect checked the one URI's path is kind<dc>/id/<instance>.
	path := certs[0].URIs[0].Path
	instance := strings.TrimPrefix(path, kind+c.cfg.Datacenter+"/id/")
	if instance == "" || instance == path || strings.Contains(instance, "/") {
		return "", errors.New(certs[0].URIs[0].String() + " names no instance")
	}
	return instance, nil
}
