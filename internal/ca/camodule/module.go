package camodule

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"
	pbca "trellis.dev/trellis/api/ca/v1"

	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/ca/command"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/module"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/tlsutil"
)

// Config tunes the CA's module. Its zero value is the production setting.
type Config struct {
	// Now is the clock the manager dates roots and statuses with
	// (time.Now when nil).
	Now func() time.Time
	// Datacenter is the server's datacenter: the one roots are made in
	// and leaves are signed for. Empty means the server's own
	// (module.Cluster.Datacenter, from -datacenter), which is what a
	// server wants; tests set it to pretend otherwise.
	Datacenter string
	// PrimaryDatacenter is the datacenter whose CA is the federation's
	// (-primary-datacenter): empty or the server's own makes
	// this cluster the primary; another makes it a secondary, which takes
	// its roots and an intermediate from the primary's servers at
	// PrimaryAddrs (-primary-address: their server-to-server addresses,
	// -server-addr),
	// over the TLS of the server ports: it presents its own server
	// certificate (module.Deps.DialServersOf), and the primary signs it
	// its own datacenter's intermediate only.
	PrimaryDatacenter string
	PrimaryAddrs      []string
	// PrimaryPollInterval is how often a secondary reads the primary's
	// roots (DefaultPrimaryPollInterval when zero).
	PrimaryPollInterval time.Duration
	// DisableServerCerts keeps the server on its certificate file
	// (-connect-server-certs=false). Otherwise a server with TLS signs
	// itself a leaf of the Connect CA once the CA is up, renews it, and
	// presents it to the peers that ask for it (see tlsutil).
	DisableServerCerts bool
	// ServerResignWindow spreads the re-signing of the server's own leaf
	// after the active root changes (DefaultServerResignWindow when zero).
	ServerResignWindow time.Duration
}

// New returns the CA's module, configured by cfg and then by its flags
// (module.Flagged), with its commands (`trellis ca`, cli.Commander).
func New(cfg Config) module.Module { return &caModule{cfg: cfg} }

type caModule struct{ cfg Config }

func (*caModule) Name() string { return "ca" }

func (*caModule) Register(r *resource.Registry) { ca.Register(r) }

// Commands are the CA's commands: trellis ca.
func (*caModule) Commands(c cli.CommandEnv) []*cobra.Command { return command.Commands(c.Env) }

// Setup builds the CA manager's controller (run on the leader), the
// signer that every server runs (its follow of the stored CA, its gRPC
// service and route, its metrics) and the read routes.
func (m *caModule) Setup(d module.Deps) (module.Parts, error) {
	if _, ok := d.Registry.Resolve(core.ClusterType); !ok {
		return module.Parts{}, errors.New("needs the core's types (the cluster id names the trust domain): add the core's module to the server")
	}
	dc := m.cfg.Datacenter
	if dc == "" {
		dc = d.Cluster.Datacenter
	}
	if dc == "" {
		dc = tlsutil.DefaultDatacenter
	}
	log := d.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	mgr := &Manager{API: d.API, Now: m.cfg.Now, Datacenter: dc, Logger: log}
	secondaryOf := ""
	var runnables []module.Runnable
	if p := m.cfg.PrimaryDatacenter; p != "" && p != dc {
		if len(m.cfg.PrimaryAddrs) == 0 {
			return module.Parts{}, fmt.Errorf("a secondary of datacenter %q needs the server-to-server address of a server of it (-primary-address)", p)
		}
		if d.DialServersOf == nil {
			return module.Parts{}, fmt.Errorf("a secondary of datacenter %q reaches its servers on their server-to-server port: the server gives no way to dial it", p)
		}
		secondaryOf = p
		client := NewPrimaryClient(m.cfg.PrimaryAddrs, d.DialServersOf(p))
		mgr.Primary, mgr.PrimaryDatacenter, mgr.PollInterval = client, p, m.cfg.PrimaryPollInterval
		mgr.Logger = log.With("primary_datacenter", p)
		runnables = append(runnables, module.Runnable{Name: "ca-primary-client", Run: client})
	}
	signer := NewSigner(SignerConfig{API: d.API, Datacenter: dc, Now: m.cfg.Now, Logger: log.With("component", "ca-signer")})
	if d.Metrics != nil {
		sm, err := newSignMetrics(d.Metrics, signer)
		if err != nil {
			return module.Parts{}, err
		}
		signer.metrics = sm
	}
	// The server's own leaf, when it serves TLS: signed here, with the
	// key the signer holds, never asked of the signing service.
	if d.ServerCerts != nil && m.cfg.DisableServerCerts {
		d.ServerCerts = nil
	}
	if leaf := newServerLeaf(d, signer, m.cfg.ServerResignWindow, log); leaf != nil {
		if d.Metrics != nil {
			if err := d.Metrics.Register(serverLeafCollector{m: leaf}); err != nil {
				return module.Parts{}, err
			}
		}
		runnables = append(runnables, module.Runnable{Name: "ca-server-leaf", Run: leaf})
	}
	// The server's TLS trusts the CA's roots: agents' leaves on the
	// public port, servers' leaves on the server ports.
	if d.ConnectTrust != nil {
		runnables = append(runnables, module.Runnable{Name: "connect-roots", Run: connectRoots{api: d.API, tls: d.ConnectTrust, datacenter: dc, log: log.With("component", "connect-roots")}})
		tlsLog := log.With("component", "tls")
		d.ConnectTrust.OnConnectReady(func(closed int) {
			tlsLog.Info("this server holds its Connect CA leaf and the CA's roots: it presents the leaf to the peers that ask for it; its Raft links are opened again to use it (Raft may log their closing), the server RPCs' links as they reach their age", "raft_links_closed", closed)
		})
	}
	return module.Parts{
		Controllers: []controller.Controller{mgr.Controller()},
		PublicServices: []module.Service{{
			Desc: &pbca.CAService_ServiceDesc, Impl: caService{signer: signer}, Permissions: servicePermissions,
		}},
		ServerServices: []module.Service{{
			Desc: &pbca.CAFederation_ServiceDesc, Impl: federationService{api: d.API, signer: signer, secondaryOf: secondaryOf},
			Permissions: federationPermissions, AllDatacenters: true,
		}},
		Routes:    append(routes{api: d.API, now: m.cfg.Now, datacenter: dc, secondaryOf: secondaryOf}.table(), signRoute{signer: signer}.table()...),
		Runnables: append([]module.Runnable{{Name: "ca-signer", Run: signer}}, runnables...),
	}, nil
}
