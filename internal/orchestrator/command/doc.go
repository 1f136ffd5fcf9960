// Package command is the orchestrator's face on the command line: the
// trellis instance, taskdef and task commands, and the reads and writes
// they make, all through the HTTP API's generic resource face (the
// orchestrator has no operations of its own). cmd/trellis only adds them
// to the command tree (Commands).
//
// Design decisions:
//
//   - Every command is a cli.ClientCommand: it declares its flags, what it
//     refuses before any request, and a run that returns what to print;
//     cli.Env.Command parses, makes the client, prints in the -o format
//     and words a server that cannot be reached, the same for every
//     domain.
//   - Edits of what the agent also writes (an Instance's drain and
//     attributes, a Task's desired status) are compare-and-swap writes,
//     re-read and retried on a conflict, so that a heartbeat between the
//     read and the write loses nothing.
//   - A task definition's revision is assigned here, one more than the
//     family's latest; a revision is immutable, so two registrations
//     racing for one number cannot both win, and the loser takes the next.
package command

import (
	"github.com/spf13/cobra"

	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/resource"
)

// Commands are the orchestrator's top-level commands: instance, taskdef
// and task. types are the types the server serves (server.Types), against
// which a task definition file is checked before it is sent.
func Commands(e *cli.Env, types *resource.Registry) []*cobra.Command {
	return []*cobra.Command{newInstanceCmd(e), newTaskDefCmd(e, types), newTaskCmd(e)}
}
