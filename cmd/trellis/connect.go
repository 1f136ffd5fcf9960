package main

import (
	"github.com/spf13/cobra"

	"trellis.dev/trellis/internal/cli"
	redirectcommand "trellis.dev/trellis/internal/redirect/command"
)

// newConnectCmd is the group of the mesh's commands that run beside a
// task, on its instance, rather than against the API.
func newConnectCmd(e *cli.Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "connect",
		Short: "Set up a mesh task's networking on its instance: traffic redirection",
		Long: `Commands that run on an instance, beside a task in the service mesh, rather than
against the API. The agent runs them for mesh tasks; they can be run by hand.`,
		Example: `  trellis connect redirect-traffic --app-port 8080 --dry-run`,
	}
	cmd.AddCommand(redirectcommand.NewRedirectTrafficCmd(e))
	return cmd
}
