// Package command is the catalog's part of the CLI: `trellis service`, a
// client of the generic resource API (the catalog's Services and
// ServiceInstances), of the Consul-compatible health route (each
// instance's health as every reader sees it) and of the catalog's
// operation that refreshes a TTL check.
package command

import (
	"github.com/spf13/cobra"

	"trellis.dev/trellis/internal/cli"
)

// Commands are the catalog's top-level commands: service.
func Commands(c cli.CommandEnv) []*cobra.Command {
	cmd := &cobra.Command{
		Use:   "service",
		Short: "The service catalog: services, their instances and their health",
		Long: `The service catalog says which services a namespace has, where their instances
listen and how healthy each is. An instance of a task is registered by the
agent that runs it, and its checks follow its task's health. A service that
runs outside Trellis (a database on a VM) is registered here, with TTL checks
that whoever watches it refreshes with 'trellis service check'; a TTL check
not refreshed in time turns critical.

Tools written for Consul read the same catalog through its HTTP API
(/v1/catalog/services, /v1/health/service/NAME). See docs/catalog.md.`,
		Example: `  trellis service list
  trellis service show api
  trellis service register -f db.yaml
  trellis service check pass db-1 alive --note "replication ok"
  trellis service deregister db-1`,
	}
	cmd.AddCommand(newListCmd(c.Env), newShowCmd(c.Env), newRegisterCmd(c), newDeregisterCmd(c.Env), newCheckCmd(c.Env))
	return []*cobra.Command{cmd}
}
