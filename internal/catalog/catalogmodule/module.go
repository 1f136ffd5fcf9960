// Package catalogmodule is the service catalog as a module of the server
// (internal/module): its types (catalog/v1/Service, ServiceInstance), served
// by the generic resource API, and the health controller that owns the
// servers' status key of an instance's checks.
package catalogmodule

import (
	"errors"
	"time"

	"github.com/spf13/cobra"

	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/catalog/command"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/module"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
)

// Config tunes the catalog's module. Its zero value is the production
// setting.
type Config struct {
	// Now is the clock TTL checks expire by (time.Now when nil).
	Now func() time.Time
}

// New returns the catalog's module.
func New(cfg Config) module.Module { return catalogModule{cfg: cfg} }

type catalogModule struct{ cfg Config }

func (catalogModule) Name() string { return "catalog" }

func (catalogModule) Register(r *resource.Registry) { catalog.Register(r) }

// Commands are the catalog's commands: trellis service (cli.Commander).
func (catalogModule) Commands(c cli.CommandEnv) []*cobra.Command { return command.Commands(c) }

// Setup builds the health controller, run on the leader, the operation
// that refreshes TTL checks (checkOps), and, on a
// server with an informer, Consul's catalog and health read routes
// (consulAPI), which answer on every server.
func (m catalogModule) Setup(d module.Deps) (module.Parts, error) {
	if d.API == nil {
		return module.Parts{}, errors.New("needs the resource API")
	}
	hc := HealthController(d.API, m.cfg.Now, d.Logger)
	now := m.cfg.Now
	if now == nil {
		now = time.Now
	}
	parts := module.Parts{Controllers: hc, Routes: checkOps{api: d.API, now: now}.routes()}
	if d.Informer != nil {
		machines := false
		if d.Registry != nil {
			_, machines = d.Registry.Resolve(orchestrator.InstanceType)
		}
		if err := d.Informer.Declare(consulTypes(machines)...); err != nil {
			return module.Parts{}, err
		}
		parts.Routes = append(parts.Routes, consulAPI{in: d.Informer, datacenter: d.Cluster.Datacenter, machines: machines}.routes()...)
	}
	return parts, nil
}
