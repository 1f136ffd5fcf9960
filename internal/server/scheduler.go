package server

import (
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/scheduler"
	"trellis.dev/trellis/internal/scheduler/controllers"
	"trellis.dev/trellis/internal/scheduler/operations"
)

// addScheduler wires the daemon scheduler when the registry serves its
// types and the orchestrator's: its controller (on the leader) and its
// operations (on every server, for the HTTP API). It returns nil when the
// scheduler is not served.
func (s *Server) addScheduler() *operations.Operations {
	if _, ok := s.registry.Resolve(scheduler.EnvironmentType); !ok || s.leadership == nil {
		return nil
	}
	if _, ok := s.registry.Resolve(orchestrator.TaskType); !ok {
		return nil
	}
	s.AddController(controllers.Controller(controllers.Config{API: s.api, Logger: s.log.With("component", "scheduler")}))
	return &operations.Operations{API: s.api}
}
