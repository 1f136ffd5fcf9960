package main

import (
	"github.com/spf13/pflag"

	"trellis.dev/trellis/internal/cli"
)

// logLevels are the values of -log-level, a closed set: it refuses any
// other value while the flags are parsed, naming the flag and the values
// it takes, and completes them in the shell. (The client commands' closed
// sets, -o and the domains' filters, are declared beside them.)
var logLevels = []string{"debug", "info", "warn", "error"}

func addLogLevelFlag(fs *pflag.FlagSet, level *string, def string) {
	fs.Var(cli.NewChoice(level, def, "a log level", logLevels...), "log-level", "log level: debug, info, warn or error")
}
