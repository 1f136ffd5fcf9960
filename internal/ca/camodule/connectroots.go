package camodule

import (
	"context"
	"crypto/x509"
	"log/slog"
	"time"

	pbca "trellis.dev/trellis/api/ca/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/backoff"
	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/module"
	"trellis.dev/trellis/internal/resource"
)

// connectRoots follows the Connect CA's roots in this server's state and
// hands them to the server's TLS (module.ConnectTrust, tlsutil's
// SetConnectRoots), so that
// agents presenting an agent leaf of the CA (auto-encrypt) are accepted on
// the public ports, and servers presenting a server leaf on the server
// ports, through rotations: every listed root, active or not, is trusted.
// With them go the CAs that sign this datacenter's leaves
// (ca.DatacenterSigners): a server leaf is taken only from one of them.
type connectRoots struct {
	api resource.API
	tls module.ConnectTrust
	// datacenter is this server's.
	datacenter string
	log        *slog.Logger
}

// connectRootsRetry: a broken watch of the roots is opened again after a
// second, every time (it watches this server's own state).
var connectRootsRetry = backoff.Policy{Base: time.Second, Max: time.Second}

func (c connectRoots) Start(ctx context.Context) error {
	return resource.NewWatchedSet(resource.WatchedSetConfig{
		Source: c.api,
		Type:   ca.RootType,
		Changed: func(byName map[string]*pbresource.Resource) error {
			c.set(byName)
			return nil
		},
		Retry:  connectRootsRetry,
		Logger: c.log,
	}).Start(ctx)
}

func (c connectRoots) set(byName map[string]*pbresource.Resource) {
	var certs []*x509.Certificate
	var decoded []*pbca.CARoot
	td := ""
	for name, res := range byName {
		root, err := resource.DecodeData[*pbca.CARoot](res)
		if err != nil {
			c.log.Warn("a stored root does not decode; skipped", "root", name, "err", err)
			continue
		}
		parsed, err := ca.ParseCerts([]byte(root.GetRootCert()))
		if err != nil {
			c.log.Warn("a stored root's certificate does not parse; skipped", "root", name, "err", err)
			continue
		}
		certs = append(certs, parsed[0])
		decoded = append(decoded, root)
		// Every root of a cluster is of one trust domain; the active
		// root's names it.
		if td == "" || root.GetActive() {
			td = root.GetTrustDomain()
		}
	}
	signers, err := ca.DatacenterSigners(decoded, c.datacenter)
	if err != nil {
		c.log.Warn("a stored root's certificates do not parse; skipped as signers of this datacenter", "err", err)
	}
	c.tls.SetConnectRoots(td, certs, signers)
}
