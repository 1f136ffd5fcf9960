package cli

import (
	"github.com/spf13/cobra"

	"trellis.dev/trellis/internal/resource"
)

// Commander is a module (internal/module) with CLI commands: `trellis
// <noun> <verb>`, clients of the module's HTTP routes. The CLI asks the
// server's modules for them without setting them up or starting a server,
// and adds each to `trellis`, refusing a name two owners give; the
// commands live in the domain's command package
// (internal/<domain>/command), and the module only hands them over.
// (The interface is here, not in internal/module, so that the modules'
// seam does not depend on the CLI.)
type Commander interface {
	// Commands returns the module's top-level commands, new at each call.
	// The CLI adds the client flags (-addr, -token, -tls-ca-file) to each.
	Commands(c CommandEnv) []*cobra.Command
}

// CommandEnv is what a module's commands are built with.
type CommandEnv struct {
	// Env is the process's input, output and environment, and the client
	// flags' values.
	Env *Env
	// Types registers the types of every module of the server, to check a
	// spec file as the server would before sending it.
	Types *resource.Registry
}
