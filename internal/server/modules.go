package server

import (
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"trellis.dev/trellis/internal/ca/camodule"
	"trellis.dev/trellis/internal/catalog/catalogmodule"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/httpapi"
	"trellis.dev/trellis/internal/mesh/meshmodule"
	"trellis.dev/trellis/internal/module"
	"trellis.dev/trellis/internal/orchestrator/orchestratormodule"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/scheduler/schedulermodule"
)

// DefaultModules are the domains a server serves unless its Config names
// others: the core (namespaces), the orchestrator, the daemon scheduler,
// the Connect CA, the service catalog and the mesh's policy (intentions),
// each new and unconfigured. This list is the one place a domain is
// added: a module brings its types and parts (module.Module), its flags
// (module.Flagged) and its CLI commands (cli.Commander), so that neither
// this package nor cmd/trellis changes for it.
func DefaultModules() []module.Module {
	return []module.Module{
		core.Module(),
		orchestratormodule.New(orchestratormodule.Config{}),
		schedulermodule.New(),
		camodule.New(camodule.Config{}),
		catalogmodule.New(catalogmodule.Config{}),
		meshmodule.New(meshmodule.Config{}),
	}
}

// DefaultModulesWith are DefaultModules configured as the flags args of
// `trellis server` would (module.ParseFlags; for example "-heartbeat-ttl",
// "2s"): for programs and tests that assemble a server without its command
// line.
func DefaultModulesWith(args ...string) ([]module.Module, error) {
	mods := DefaultModules()
	if err := module.ParseFlags(mods, module.Server, args...); err != nil {
		return nil, err
	}
	return mods, nil
}

// Types returns a registry of the types of the default modules. The CLI
// uses it to check a spec file against the same types and hooks as the
// server before it sends anything.
func Types() *resource.Registry {
	r, err := TypesOf(DefaultModules())
	if err != nil {
		panic(err) // the default modules are this package's own list
	}
	return r
}

// TypesOf returns a registry of the types of mods, refusing modules
// without a name of their own and types registered twice.
func TypesOf(mods []module.Module) (*resource.Registry, error) { return registryOf(mods) }

// registryOf registers the types of every module in a new registry,
// refusing modules without a name of their own and types registered twice
// (which the registry answers with a panic).
func registryOf(mods []module.Module) (_ *resource.Registry, err error) {
	seen := map[string]bool{}
	for _, m := range mods {
		if name := m.Name(); name == "" || seen[name] {
			return nil, fmt.Errorf("%w: module %q: every module needs a name of its own", ErrConfig, name)
		}
		seen[m.Name()] = true
	}
	r := resource.NewRegistry()
	for _, m := range mods {
		func() {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("%w: module %s: %v", ErrConfig, m.Name(), p)
				}
			}()
			m.Register(r)
		}()
		if err != nil {
			return nil, err
		}
	}
	return r, nil
}

// setupModules builds each module's parts, in the order of the list, and
// wires them into the server: controllers, gRPC services (with their
// methods' permissions added to the table the interceptors read),
// runnables; it returns the HTTP routes, for the handler. A module that
// fails, or whose parts declare no permission for a route or a method,
// fails the server before anything is served.
func (s *Server) setupModules(mods []module.Module) ([]httpapi.Route, error) {
	var routes []httpapi.Route
	for _, m := range mods {
		name := m.Name()
		parts, err := m.Setup(s.moduleDeps())
		if err == nil {
			err = parts.Check()
		}
		if err == nil {
			err = s.addServices(parts)
		}
		if err != nil {
			return nil, fmt.Errorf("module %s: %w", name, err)
		}
		if parts.AgentSessions != nil {
			if s.agentSessions != nil {
				return nil, fmt.Errorf("module %s: sets AgentSessions, which another module set already: one module registers agents", name)
			}
			s.agentSessions = parts.AgentSessions
		}
		for _, c := range parts.Controllers {
			s.AddController(c)
		}
		for _, r := range parts.Runnables {
			s.Add(r.Name, r.Run)
		}
		routes = append(routes, parts.Routes...)
	}
	return routes, nil
}

// moduleDeps is what a module may use of this server.
func (s *Server) moduleDeps() module.Deps {
	d := module.Deps{
		API:      s.api,
		Registry: s.registry,
		Cache:    s.ControllerCache(),
		Informer: s.informer,
		Logger:   s.log,
		Metrics:  s.metrics,
		Cluster:  module.Cluster{Datacenter: s.cfg.Datacenter, ServerID: s.serverID, GRPCAddr: s.GRPCAddr(), ServerAddr: s.ServerAddr()},
	}
	if s.cfg.TLS != nil {
		d.ServerCerts, d.ConnectTrust = s.cfg.TLS, s.cfg.TLS
	}
	d.DialServersOf = func(string) credentials.TransportCredentials { return insecure.NewCredentials() }
	if s.cfg.TLS != nil {
		d.DialServersOf = s.cfg.TLS.DialServersOf
	}
	if s.leadership != nil {
		d.Leadership = s.leadership.Subscribe
	}
	if s.raft != nil {
		b := s.raft.Backend()
		d.Cluster.LeaderConn = b.LeaderConn
		d.Cluster.LeaderChanged = b.Changed
		d.Cluster.LeaderIndex = b.LeaderIndex
		d.Cluster.ServerAddrs = b.ServerAddrs
		d.Cluster.ServerConn = b.ServerConn
	}
	return d
}

// errDuplicateService refuses a second registration of a gRPC service on
// one server, which grpc.Server would answer with a panic.
var errDuplicateService = errors.New("is registered twice on one port")

// addServices registers a module's gRPC services: the public ones on the
// public port, the server ones on the server-to-server port (a server in
// memory has none, and serves none of them), after their permissions
// join the table.
func (s *Server) addServices(p module.Parts) error {
	for _, on := range []struct {
		list   []module.Service
		server *grpc.Server
	}{
		{p.PublicServices, s.grpc},
		{p.ServerServices, s.serverGRPC},
	} {
		if on.server == nil {
			continue
		}
		for _, svc := range on.list {
			if _, ok := on.server.GetServiceInfo()[svc.Desc.ServiceName]; ok {
				return fmt.Errorf("gRPC service %s %w", svc.Desc.ServiceName, errDuplicateService)
			}
			perms, err := svc.FullPermissions()
			if err != nil {
				return err
			}
			if err := s.authz.add(perms); err != nil {
				return err
			}
			on.server.RegisterService(svc.Desc, svc.Impl)
			if svc.AllDatacenters && on.server == s.serverGRPC {
				s.serverGate.allDatacenters[svc.Desc.ServiceName] = true
			}
		}
	}
	return nil
}
