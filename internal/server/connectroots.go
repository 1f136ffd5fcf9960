package server

import (
	"context"
	"crypto/x509"
	"log/slog"
	"time"

	pbca "trellis.dev/trellis/api/ca/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/tlsutil"
)

// connectRoots follows the Connect CA's roots in this server's state and
// hands them to the server's TLS (tlsutil's SetConnectRoots), so that
// agents presenting an agent leaf of the CA (auto-encrypt) are accepted on
// the public ports, and servers presenting a server leaf on the server
// ports, through rotations: every listed root, active or not, is trusted.
type connectRoots struct {
	api resource.API
	tls *tlsutil.Configurator
	log *slog.Logger
}

func (c connectRoots) Start(ctx context.Context) error {
	for {
		err := c.follow(ctx)
		if ctx.Err() != nil {
			return nil
		}
		c.log.Warn("the watch of the Connect CA's roots ended; opening it again", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

func (c connectRoots) follow(ctx context.Context) error {
	w, err := c.api.Watch(ctx, &pbresource.WatchListRequest{Type: ca.RootType})
	if err != nil {
		return err
	}
	defer w.Close()
	byName := map[string]*pbca.CARoot{}
	listed := false
	for {
		ev, err := w.Next(ctx)
		if err != nil {
			return err
		}
		switch ev.GetOp() {
		case pbresource.WatchEvent_OP_UPSERT:
			root, err := resource.DecodeData[*pbca.CARoot](ev.GetResource())
			if err != nil {
				c.log.Warn("a stored root does not decode; skipped", "root", ev.GetResource().GetId().GetName(), "err", err)
				continue
			}
			byName[ev.GetResource().GetId().GetName()] = root
		case pbresource.WatchEvent_OP_DELETE:
			delete(byName, ev.GetResource().GetId().GetName())
		case pbresource.WatchEvent_OP_END_OF_SNAPSHOT:
			listed = true
		}
		if listed {
			c.set(byName)
		}
	}
}

func (c connectRoots) set(byName map[string]*pbca.CARoot) {
	var certs []*x509.Certificate
	td := ""
	for name, root := range byName {
		parsed, err := ca.ParseCerts([]byte(root.GetRootCert()))
		if err != nil {
			c.log.Warn("a stored root's certificate does not parse; skipped", "root", name, "err", err)
			continue
		}
		certs = append(certs, parsed[0])
		// Every root of a cluster is of one trust domain; the active
		// root's names it.
		if td == "" || root.GetActive() {
			td = root.GetTrustDomain()
		}
	}
	c.tls.SetConnectRoots(td, certs)
}
