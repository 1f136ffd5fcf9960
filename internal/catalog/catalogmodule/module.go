// Package catalogmodule is the service catalog as a module of the server
// (internal/module): its types (catalog/v1/Service, ServiceInstance), served
// by the generic resource API, the health controller that owns the
// servers' status key of an instance's checks, and the DNS interface
// (internal/dns, -dns-addr), which answers from the server's informer on
// every server, followers too.
package catalogmodule

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/catalog/command"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/dns"
	"trellis.dev/trellis/internal/informer"
	"trellis.dev/trellis/internal/module"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
)

// Config tunes the catalog's module. Its zero value is the production
// setting.
type Config struct {
	// Now is the clock TTL checks expire by (time.Now when nil).
	Now func() time.Time
	// DNSAddr is where the DNS interface listens, UDP and TCP (host:port;
	// port 0 picks one); "" serves none. Its flag, -dns-addr, defaults to
	// dns.DefaultAddr.
	DNSAddr string
	// DNSTTL is the TTL of the DNS answers (0: no resolver keeps them).
	DNSTTL uint32
}

// New returns the catalog's module, configured by cfg and then by its
// flags (module.Flagged: -dns-addr).
func New(cfg Config) module.Module { return &catalogModule{cfg: cfg} }

type catalogModule struct {
	cfg Config
	dns atomic.Pointer[dns.Server]
}

func (*catalogModule) Name() string { return "catalog" }

func (*catalogModule) Register(r *resource.Registry) { catalog.Register(r) }

// Commands are the catalog's commands: trellis service (cli.Commander).
func (*catalogModule) Commands(c cli.CommandEnv) []*cobra.Command { return command.Commands(c) }

// Setup builds the health controller, run on the leader, the operation
// that refreshes TTL checks (checkOps), and, on a
// server with an informer, Consul's catalog and health read routes
// (consulAPI) and the DNS interface (-dns-addr), which answer on every
// server.
func (m *catalogModule) Setup(d module.Deps) (module.Parts, error) {
	if d.API == nil {
		return module.Parts{}, errors.New("needs the resource API")
	}
	hc := HealthController(d.API, m.cfg.Now, d.Logger)
	now := m.cfg.Now
	if now == nil {
		now = time.Now
	}
	parts := module.Parts{Controllers: hc, Routes: checkOps{api: d.API, now: now}.routes()}
	machines := false
	if d.Registry != nil {
		_, machines = d.Registry.Resolve(orchestrator.InstanceType)
	}
	if d.Informer != nil {
		if err := d.Informer.Declare(consulTypes(machines)...); err != nil {
			return module.Parts{}, err
		}
		changes, answers := newServiceChanges(), newAnswerCache(DefaultAnswerCacheBytes)
		// A change evicts its services' answers before it moves their
		// indexes: no answer built at the new indexes is evicted.
		if _, err := d.Informer.Subscribe(catalog.ServiceInstanceType, func(d informer.Delta) {
			services := servicesOf(d)
			answers.evict(services)
			changes.apply(services, d.Index)
		}); err != nil {
			return module.Parts{}, err
		}
		if d.Metrics != nil {
			if err := d.Metrics.Register(answerCollector{answers: answers, changes: changes}); err != nil {
				return module.Parts{}, err
			}
		}
		parts.Routes = append(parts.Routes, consulAPI{in: d.Informer, datacenter: d.Cluster.Datacenter, serverID: d.Cluster.ServerID, machines: machines, changes: changes, answers: answers}.routes()...)
	}
	if m.cfg.DNSAddr == "" {
		return parts, nil
	}
	if d.Informer == nil {
		return module.Parts{}, errors.New("-dns-addr: the DNS interface needs the server's informer")
	}
	if err := d.Informer.Declare(dns.CachedTypes(machines)...); err != nil {
		return module.Parts{}, fmt.Errorf("-dns-addr: %w", err)
	}
	log := d.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	srv, err := dns.NewServer(dns.Config{Addr: m.cfg.DNSAddr, Catalog: dns.InformerCatalog{In: d.Informer, Machines: machines}, TTL: m.cfg.DNSTTL, Logger: log.With("component", "dns")})
	if err != nil {
		return module.Parts{}, fmt.Errorf("-dns-addr: %w", err)
	}
	// Bound now, as the server binds its own ports in server.New: a port
	// in use fails the start before any agent of trellis dev has begun.
	if err := srv.Listen(); err != nil {
		return module.Parts{}, fmt.Errorf("-dns-addr: %w", err)
	}
	m.dns.Store(srv)
	parts.Runnables = append(parts.Runnables, module.Runnable{Name: "dns", Run: srv})
	return parts, nil
}

// DNSAddr is the address the module's DNS interface listens on, once the
// server has started it; "" before, or when it serves none.
func (m *catalogModule) DNSAddr() string {
	if s := m.dns.Load(); s != nil {
		return s.Addr()
	}
	return ""
}

// Flags declares the catalog's flags, on trellis server and trellis dev:
// -dns-addr.
func (m *catalogModule) Flags(fs *pflag.FlagSet, p module.Process) {
	def := m.cfg.DNSAddr
	if def == "" {
		def = dns.DefaultAddr
	}
	fs.StringVar(&m.cfg.DNSAddr, "dns-addr", def,
		"address of the DNS interface, UDP and TCP (host:port), which answers <service>.service.<namespace>.trellis. (A, AAAA, SRV) with the passing instances of the catalog, from this server's own cache (see docs/dns.md); empty serves none")
}

// CheckFlags checks -dns-addr: empty, or an IP address and a port.
func (m *catalogModule) CheckFlags(module.Settings) error {
	if m.cfg.DNSAddr == "" {
		return nil
	}
	return dns.CheckAddr("-dns-addr", m.cfg.DNSAddr)
}
