package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/client"
	"trellis.dev/trellis/internal/tlsutil"
)

// env is what commands read from and write to, so tests can run them in
// process.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	now            func() time.Time
}

func stdEnv() *env {
	return &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, now: time.Now}
}

// usageError is a mistake in how a command was called (exit status 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// execute runs the command line and returns the exit status: 0, 1 when
// the command failed, 2 when it was called wrongly.
func execute(ctx context.Context, args []string, e *env) int {
	root := newRootCmd(e)
	root.SetArgs(cli.NormalizeArgs(args, longFlags(root)))
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintf(e.stderr, "Error: %v\n", err)
	var ue usageError
	if errors.As(err, &ue) || isCobraUsageError(err) {
		fmt.Fprintf(e.stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
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
		strings.HasPrefix(msg, "unknown shorthand flag")
}

func newRootCmd(e *env) *cobra.Command {
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
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	root.SetIn(e.stdin)
	root.SetFlagErrorFunc(flagError)
	root.CompletionOptions.DisableDefaultCmd = true // ours refuses shells other than bash, zsh and fish
	root.SetHelpCommand(newHelpCmd())
	root.SetUsageTemplate(groupUsage(root.UsageTemplate()))
	// The client flags (-addr, -token) go only on the commands that talk
	// to a server over HTTP, so that `trellis server -addr ...` is refused
	// rather than ignored. The agent and sim take -token alone: they reach
	// the servers over gRPC, at the addresses of -server.
	cf := &clientFlags{}
	clients := []*cobra.Command{newResourceCmd(e, cf), newOperatorCmd(e, cf), newSnapshotCmd(e, cf), newInstanceCmd(e, cf),
		newTaskDefCmd(e, cf), newTaskCmd(e, cf), newEnvCmd(e, cf), newDeployCmd(e, cf), newDeploymentCmd(e, cf), newRollbackCmd(e, cf)}
	for _, c := range clients {
		cf.register(c.PersistentFlags())
	}
	root.AddCommand(clients...)
	root.AddCommand(newDevCmd(e), newServerCmd(e), newAgentCmd(e, cf), newSimCmd(e, cf), newTLSCmd(e), newVersionCmd(e, build), newCompletionCmd(e))
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

// clientFlags are the flags of every command that talks to a server's
// HTTP API.
type clientFlags struct {
	addr   string
	token  string
	caFile string
}

func (f *clientFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.addr, "addr", "", "HTTP address of a Trellis server (env TRELLIS_ADDR; default "+client.DefaultAddr+"); https://HOST:PORT for a server's -https-addr")
	fs.StringVar(&f.caFile, "tls-ca-file", "", "the cluster CA's certificate (PEM) that an https:// server's certificate must be signed by (env TRELLIS_CACERT)")
	f.registerToken(fs)
}

// registerToken adds -token alone, for the agent and sim, which have
// their own flag for the servers' addresses.
func (f *clientFlags) registerToken(fs *pflag.FlagSet) {
	fs.StringVar(&f.token, "token", "", "ACL token to send (env TRELLIS_TOKEN)")
}

// tokenFor is -token, or else TRELLIS_TOKEN.
func (f *clientFlags) tokenFor(e *env) string {
	if f.token != "" {
		return f.token
	}
	return e.getenv("TRELLIS_TOKEN")
}

func (f *clientFlags) client(e *env) (*client.Client, error) {
	addr, token := f.addr, f.tokenFor(e)
	if addr == "" {
		addr = e.getenv("TRELLIS_ADDR")
	}
	opts := []client.Option{client.WithToken(token)}
	caFile := f.caFile
	if caFile == "" {
		caFile = e.getenv("TRELLIS_CACERT")
	}
	if caFile != "" {
		tc, err := tlsutil.New(tlsutil.Config{CAFile: caFile})
		if err != nil {
			return nil, usageError{err}
		}
		// Only a server of the cluster's CA is accepted, whatever address
		// it is reached at (see tlsutil.OutgoingClientConfig).
		opts = append(opts, client.WithHTTPClient(&http.Client{Transport: &http.Transport{
			Proxy: http.ProxyFromEnvironment, TLSClientConfig: tc.OutgoingClientConfig(),
		}}))
	}
	c, err := client.New(addr, opts...)
	if err != nil {
		return nil, usageError{fmt.Errorf("-addr: %w", err)}
	}
	return c, nil
}
