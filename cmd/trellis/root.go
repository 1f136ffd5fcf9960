package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	cacommand "trellis.dev/trellis/internal/ca/command"
	"trellis.dev/trellis/internal/cli"
	meshcommand "trellis.dev/trellis/internal/mesh/command"
	orchcommand "trellis.dev/trellis/internal/orchestrator/command"
	schedcommand "trellis.dev/trellis/internal/scheduler/command"
	"trellis.dev/trellis/internal/server"
)

// execute runs the command line and returns the exit status: 0, 1 when
// the command failed, 2 when it was called wrongly.
func execute(ctx context.Context, args []string, e *cli.Env) int {
	root := newRootCmd(e)
	root.SetArgs(cli.NormalizeArgs(args, longFlags(root)))
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintf(e.Stderr, "Error: %v\n", err)
	var ue cli.UsageError
	if errors.As(err, &ue) || isCobraUsageError(err) {
		fmt.Fprintf(e.Stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		return 2
	}
	return 1
}

// isCobraUsageError recognises cobra's own argument and command errors,
// which it does not type.
func isCobraUsageError(err error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "unknown command") || strings.HasPrefix(msg, "accepts ") ||
		strings.HasPrefix(msg, "requires ") || strings.HasPrefix(msg, "unknown flag") ||
		strings.HasPrefix(msg, "unknown shorthand flag") ||
		// cobra's flag groups (MarkFlagsMutuallyExclusive and the like)
		strings.HasPrefix(msg, "if any flags in the group") ||
		strings.HasPrefix(msg, "at least one of the flags in the group")
}

func newRootCmd(e *cli.Env) *cobra.Command {
	build := cli.ReadBuild(readBuildInfo(), stamp())
	root := &cobra.Command{
		Use:   "trellis",
		Short: "Trellis: a cluster orchestrator and service-mesh control plane in one binary",
		Long: `Trellis runs tasks on machines and connects them through a service mesh, all
stored as typed resources in a Raft-replicated store and driven by controllers.

Start here:
  trellis dev                                  run a server in memory on 127.0.0.1:7700
  trellis resource list core/v1/Namespace      list resources through its HTTP API

Flags take one dash or two: -addr and --addr are the same.`,
		// The whole report, so that --version prints what `trellis
		// version` does; the template only echoes it, so nothing in a
		// stamped version is read as a template.
		Version:       build.String(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("{{.Version}}")
	root.SetOut(e.Stdout)
	root.SetErr(e.Stderr)
	root.SetIn(e.Stdin)
	root.SetFlagErrorFunc(flagError)
	root.CompletionOptions.DisableDefaultCmd = true // ours refuses shells other than bash, zsh and fish
	root.SetHelpCommand(newHelpCmd())
	root.SetUsageTemplate(groupUsage(root.UsageTemplate()))
	// The client flags (-addr, -token) go only on the commands that talk
	// to a server over HTTP, so that `trellis server -addr ...` is refused
	// rather than ignored. The agent and sim take -token alone: they reach
	// the servers over gRPC, at the addresses of -server.
	// Each domain's commands live beside its client code; they are only
	// added here.
	clients := []*cobra.Command{newResourceCmd(e), newOperatorCmd(e), newSnapshotCmd(e)}
	clients = append(clients, orchcommand.Commands(e, server.Types())...)
	clients = append(clients, schedcommand.Commands(e)...)
	clients = append(clients, cacommand.Commands(e)...)
	clients = append(clients, meshcommand.Commands(e)...)
	for _, c := range clients {
		e.ClientFlags.Register(c.PersistentFlags())
	}
	root.AddCommand(clients...)
	root.AddCommand(newDevCmd(e), newServerCmd(e), newAgentCmd(e), newSimCmd(e), newTLSCmd(e), newConnectCmd(e), newVersionCmd(e, build), newCompletionCmd(e))
	root.InitDefaultVersionFlag() // now, so that longFlags sees -version
	harden(root)
	return root
}

// longFlags collects every long flag name in the command tree.
func longFlags(root *cobra.Command) map[string]bool {
	names := map[string]bool{"help": true}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		add := func(f *pflag.Flag) { names[f.Name] = true }
		c.Flags().VisitAll(add)
		c.PersistentFlags().VisitAll(add)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return names
}
