package camodule

import (
	"errors"
	"time"

	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/module"
	"trellis.dev/trellis/internal/resource"
)

// Config tunes the CA's module. Its zero value is the production setting.
type Config struct {
	// Now is the clock the manager dates roots and statuses with
	// (time.Now when nil).
	Now func() time.Time
	// Datacenter is the server's datacenter: the one roots are made in.
	// Empty means the server's own (module.Cluster.Datacenter, from
	// -datacenter), which is what a server wants; tests set it to
	// pretend otherwise.
	Datacenter string
}

// New returns the CA's module.
func New(cfg Config) module.Module { return caModule{cfg: cfg} }

type caModule struct{ cfg Config }

func (caModule) Name() string { return "ca" }

func (caModule) Register(r *resource.Registry) { ca.Register(r) }

// Setup builds the CA manager's controller (run on the leader) and the
// read routes (served by every server).
func (m caModule) Setup(d module.Deps) (module.Parts, error) {
	if _, ok := d.Registry.Resolve(core.ClusterType); !ok {
		return module.Parts{}, errors.New("needs the core's types (the cluster id names the trust domain): add the core's module to the server")
	}
	dc := m.cfg.Datacenter
	if dc == "" {
		dc = d.Cluster.Datacenter
	}
	mgr := &Manager{API: d.API, Now: m.cfg.Now, Datacenter: dc, Logger: d.Logger}
	return module.Parts{
		Controllers: []controller.Controller{mgr.Controller()},
		Routes:      routes{api: d.API, now: m.cfg.Now}.table(),
	}, nil
}
