// Package command is the Connect CA's part of the CLI: `trellis ca`, a
// client of the CA's HTTP routes (internal/ca/camodule). Today it reads
// the roots; signing, rotation and the configuration come with their
// routes.
package command

import (
	"github.com/spf13/cobra"

	"trellis.dev/trellis/internal/cli"
)

// Commands are the CA's top-level commands: ca.
func Commands(e *cli.Env) []*cobra.Command {
	cmd := &cobra.Command{
		Use:   "ca",
		Short: "Read the Connect CA: the cluster's roots and trust domain",
		Long: `The Connect CA is the cluster's own certificate authority for the mesh: the
leader makes one root at the cluster's first start, under the trust domain
<cluster-id>.trellis. Its private key never leaves the servers.`,
		Example: `  trellis ca roots
  trellis ca roots --pem > roots.pem`,
	}
	cmd.AddCommand(newRootsCmd(e))
	return []*cobra.Command{cmd}
}
