package server

import (
	"fmt"

	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/resource/reaper"
)

// AddController registers a controller to run on this server while it
// leads. It must be called before Start; the built-in owner reaper is
// always added.
func (s *Server) AddController(c controller.Controller) {
	if s.started {
		panic("server: AddController after Start")
	}
	s.controllers = append(s.controllers, c)
}

// ControllerCache is the cache the controller manager's watches keep (see
// controller.Cache): a controller that declares Controller.Cached reads it
// through the cache given here to its constructor.
func (s *Server) ControllerCache() *controller.Cache {
	if s.controllerCache == nil {
		s.controllerCache = controller.NewCache()
	}
	return s.controllerCache
}

// newControllerManager builds the manager at Start, once every type is
// registered: the reaper watches the registry's types as they are then.
func (s *Server) newControllerManager() (*controller.Manager, error) {
	mgr, err := controller.NewManager(controller.Config{
		Client:     s.api,
		Leadership: s.leadership.Subscribe(),
		Cache:      s.ControllerCache(),
		Registerer: s.metrics,
		Logger:     s.log.With("component", "controllers"),
	})
	if err != nil {
		return nil, err
	}
	running := map[string]bool{}
	for _, c := range append([]controller.Controller{reaper.Controller(s.api, s.registry)}, s.controllers...) {
		if err := mgr.Register(c); err != nil {
			return nil, fmt.Errorf("controller %s: %w", c.Name, err)
		}
		running[c.Name] = true
	}
	if err := checkStatusOwners(s.registry.Types(), running); err != nil {
		// A server composed of a domain's types without its controllers
		// (a test driving them by hand) still runs; nobody writes the key.
		s.log.Warn("a status key's owner does not run here: nobody will write it", "error", err)
	}
	return mgr, nil
}
