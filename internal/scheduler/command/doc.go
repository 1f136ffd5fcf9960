// Package command is the daemon scheduler's face on the command line: the
// trellis env, deploy, rollback and deployment commands, which call its
// operations through its client (internal/scheduler/client, the package
// beside this one, kept apart so that tests and benchmarks drive a server
// without linking the command line), how an environment spec is read from
// a file or from flags, and how environments, versions and deployments
// are shown. cmd/trellis only adds the commands to the command tree
// (Commands).
//
// Design decisions:
//
//   - Every command is a cli.ClientCommand: it declares its flags, what it
//     refuses before any request, and a run that returns what to print;
//     cli.Env.Command parses, makes the client, prints in the -o format
//     and words a server that cannot be reached, the same for every
//     domain.
//   - An environment spec file has the shape of the body the operations
//     take (client.EnvironmentSpec, through cli.StructShape), so the file
//     and the request cannot drift apart; it is checked before anything is sent, and what
//     only the server knows (does the task definition exist, do two
//     environments overlap) is left to it.
//   - env update with flags sends the whole current spec with the flags
//     over it, so that what was not given is kept whatever the server does
//     with absent fields.
//   - deploy --wait polls the deployment (pollEvery) rather than watching:
//     it outlives leader changes and server restarts, which it rides out
//     for maxPollFailures reads in a row; an error of the server's own
//     (4xx) ends it at once.
package command

import (
	"github.com/spf13/cobra"

	"trellis.dev/trellis/internal/cli"
)

// Commands are the scheduler's top-level commands: env, deploy, rollback
// and deployment.
func Commands(e *cli.Env) []*cobra.Command {
	return []*cobra.Command{newEnvCmd(e), newDeployCmd(e), newDeploymentCmd(e), newRollbackCmd(e)}
}
