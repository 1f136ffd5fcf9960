package main

import (
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/orchestrator"
)

// The closed sets of values that flags take. A flag declared with one of
// them refuses any other value while the flags are parsed, naming the
// flag and the values it takes, and completes them in the shell.
var (
	outputFormats    = []string{cli.FormatTable, cli.FormatJSON, cli.FormatYAML}
	logLevels        = []string{"debug", "info", "warn", "error"}
	taskStatuses     = []string{orchestrator.StatusPending, orchestrator.StatusRunning, orchestrator.StatusStopped, orchestrator.StatusLost}
	environmentTypes = []string{cli.EnvironmentTypeDaemon}
)

func addOutputFlag(cmd *cobra.Command, out *string) {
	cmd.Flags().VarP(cli.NewChoice(out, cli.FormatTable, "an output format", outputFormats...), "output", "o", "output format: table, json or yaml")
}

func addLogLevelFlag(fs *pflag.FlagSet, level *string, def string) {
	fs.Var(cli.NewChoice(level, def, "a log level", logLevels...), "log-level", "log level: debug, info, warn or error")
}
