// Package command is the mesh's part of the CLI: `trellis intention`, a
// client of the generic resource API for mesh/v1/Intentions (create,
// list, get, delete a source's rule) and of Decide (check, which answers
// as a proxy would and names the rule that decided).
package command

import (
	"github.com/spf13/cobra"

	"trellis.dev/trellis/internal/cli"
)

// Commands are the mesh's top-level commands: intention.
func Commands(e *cli.Env) []*cobra.Command {
	cmd := &cobra.Command{
		Use:   "intention",
		Short: "Intentions: which services may call which, and what the mesh decides",
		Long: `Intentions say which services may call a destination service through the mesh.
Each destination has one mesh/v1/Intentions resource, named after it in its
namespace, holding a rule per source: allow or deny every connection, or L7
HTTP permissions (path, methods, headers) evaluated per request in order.

The most specific rule that names a caller decides alone: an exact source
before every service of a namespace before every service of every namespace.
A caller no rule names, or a request no permission matches, gets the mesh's
default action (default_intention of mesh/v1/MeshConfig "default": allow in a
cluster whose ACLs allow by default, trellis dev included).

See docs/intentions.md.`,
		Example: `  trellis intention create web api --action allow
  trellis intention create '*' api --action deny
  trellis intention create admin api -f permissions.yaml
  trellis intention list
  trellis intention check web api
  trellis intention check admin api --path /v1/items --method GET
  trellis intention delete web api`,
	}
	cmd.AddCommand(newCreateCmd(e), newListCmd(e), newGetCmd(e), newDeleteCmd(e), newCheckCmd(e))
	return []*cobra.Command{cmd}
}
