// Package schedulermodule is the daemon scheduler as a module of the
// server (internal/module): its types, its controller, and its user
// operations served as HTTP routes under /v1/environments, each with the
// permission it needs.
package schedulermodule

import (
	"errors"

	"github.com/spf13/cobra"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/module"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/scheduler"
	"trellis.dev/trellis/internal/scheduler/command"
	"trellis.dev/trellis/internal/scheduler/controllers"
	"trellis.dev/trellis/internal/scheduler/operations"
)

// New returns the scheduler's module. It needs the orchestrator's types
// (it places Tasks on Instances), so it comes with the orchestrator's
// module.
func New() module.Module { return schedulerModule{} }

type schedulerModule struct{}

func (schedulerModule) Name() string { return "scheduler" }

func (schedulerModule) Register(r *resource.Registry) { scheduler.Register(r) }

// Commands are the scheduler's commands: env, deploy, deployment,
// rollback.
func (schedulerModule) Commands(c cli.CommandEnv) []*cobra.Command {
	return command.Commands(c.Env)
}

// Setup builds the scheduler's controller (run on the leader) and its
// operations (served by every server's HTTP API).
func (schedulerModule) Setup(d module.Deps) (module.Parts, error) {
	for _, t := range []*pbresource.Type{orchestrator.TaskType, orchestrator.InstanceType} {
		if _, ok := d.Registry.Resolve(t); !ok {
			return module.Parts{}, errors.New("needs the orchestrator's types: add the orchestrator's module to the server")
		}
	}
	ctl, err := controllers.Controller(controllers.Config{API: d.API, Logger: d.Logger.With("component", "scheduler"), Cache: d.Cache})
	if err != nil {
		return module.Parts{}, err
	}
	ops := &operations.Operations{API: d.API, Cache: d.Cache}
	return module.Parts{
		Controllers: []controller.Controller{ctl},
		Routes:      routes{ops: ops, reg: d.Registry}.table(),
	}, nil
}
