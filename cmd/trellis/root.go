package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/module"
	proxycommand "trellis.dev/trellis/internal/proxy/command"
	"trellis.dev/trellis/internal/server"
)

// execute runs the command line and returns the exit status: 0, 1 when
// the command failed, 2 when it was called wrongly.
func execute(ctx context.Context, args []string, e *cli.Env) int {
	return executeWith(ctx, args, e, server.DefaultModules)
}

// executeWith is execute with the server's modules: a module list whose
// flags or commands clash (two owners of one name) fails every command
// line, before anything runs.
func executeWith(ctx context.Context, args []string, e *cli.Env, modules func() []module.Module) int {
	root, err := buildRoot(e, modules)
	if err != nil {
		fmt.Fprintf(e.Stderr, "Error: %v\n", err)
		return 1
	}
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

// newRootCmd is the command tree of the default modules.
func newRootCmd(e *cli.Env) *cobra.Command {
	root, err := buildRoot(e, server.DefaultModules)
	if err != nil {
		panic(err) // the default modules are server's own list
	}
	return root
}

// buildRoot builds the command tree: the CLI's own commands, and the
// commands and server flags that the modules declare (cli.Commander,
// module.Flagged). modules returns new module values at each call: the
// server and dev commands each bind their own.
func buildRoot(e *cli.Env, modules func() []module.Module) (*cobra.Command, error) {
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
	root.SetUsageTemplate(moduleFlagsUsage(groupUsage(root.UsageTemplate())))
	// The client flags (-addr, -token) go only on the commands that talk
	// to a server over HTTP, so that `trellis server -addr ...` is refused
	// rather than ignored. The agent and sim take -token alone: they reach
	// the servers over gRPC, at the addresses of -server.
	// Each domain's commands live beside its client code and come from its
	// module (cli.Commander); none is named here.
	clients := []*cobra.Command{newResourceCmd(e), newOperatorCmd(e), newSnapshotCmd(e)}
	serverCmd, err := newServerCmd(e, modules())
	if err != nil {
		return nil, err
	}
	devCmd, err := newDevCmd(e, modules())
	if err != nil {
		return nil, err
	}
	own := []*cobra.Command{devCmd, serverCmd, newAgentCmd(e), newSimCmd(e), newTLSCmd(e), newConnectCmd(e), proxycommand.NewProxyCmd(e), newVersionCmd(e, build), newCompletionCmd(e)}
	var taken []string
	for _, c := range append(append([]*cobra.Command{}, clients...), own...) {
		taken = append(taken, append([]string{c.Name()}, c.Aliases...)...)
	}
	mods := modules()
	types, err := server.TypesOf(mods)
	if err != nil {
		return nil, err
	}
	domain, err := moduleCommands(mods, cli.CommandEnv{Env: e, Types: types}, append(taken, "help")...)
	if err != nil {
		return nil, err
	}
	clients = append(clients, domain...)
	for _, c := range clients {
		e.ClientFlags.Register(c.PersistentFlags())
	}
	root.AddCommand(clients...)
	root.AddCommand(own...)
	root.InitDefaultVersionFlag() // now, so that longFlags sees -version
	harden(root)
	return root, nil
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

// moduleCommands returns the commands of every module of mods that has
// some (cli.Commander), in the order of the list, refusing a name (or
// alias) that two modules give, or that is in taken (the CLI's own
// commands), naming both owners.
func moduleCommands(mods []module.Module, c cli.CommandEnv, taken ...string) ([]*cobra.Command, error) {
	owner := map[string]string{}
	for _, name := range taken {
		owner[name] = "the CLI itself"
	}
	var out []*cobra.Command
	for _, m := range mods {
		cm, ok := m.(cli.Commander)
		if !ok {
			continue
		}
		for _, cmd := range cm.Commands(c) {
			for _, name := range append([]string{cmd.Name()}, cmd.Aliases...) {
				if prev, ok := owner[name]; ok {
					return nil, fmt.Errorf("module %s gives the command %q, which %s gives too: every command has one owner", m.Name(), name, prev)
				}
				owner[name] = "module " + m.Name()
			}
			out = append(out, cmd)
		}
	}
	return out, nil
}
