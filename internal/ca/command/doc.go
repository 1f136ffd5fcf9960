// Package command is the Connect CA's part of the CLI: `trellis ca`, a
// client of the CA's HTTP routes (internal/ca/camodule): the roots, leaf
// certificates (the key is made here and never sent), the configuration
// (get, set -f) and rotation.
package command

import (
	"github.com/spf13/cobra"

	"trellis.dev/trellis/internal/cli"
)

// Commands are the CA's top-level commands: ca.
func Commands(e *cli.Env) []*cobra.Command {
	cmd := &cobra.Command{
		Use:   "ca",
		Short: "The Connect CA: the cluster's roots, leaf certificates, its configuration, rotation",
		Long: `The Connect CA is the cluster's own certificate authority for the mesh: the
leader makes one root at the cluster's first start, under the trust domain
<cluster-id>.trellis, and rotates to a new one, cross-signed by the old, when
asked. Its private keys never leave the servers, which sign leaf certificates
for services and agents with them.`,
		Example: `  trellis ca roots
  trellis ca roots --pem > roots.pem
  trellis ca leaf web
  trellis ca config get
  echo 'leaf_ttl: 24h' | trellis ca config set -f -
  trellis ca rotate`,
	}
	cmd.AddCommand(newRootsCmd(e), newLeafCmd(e), newConfigCmd(e), newRotateCmd(e))
	return []*cobra.Command{cmd}
}
