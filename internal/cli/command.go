package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/proto"

	"trellis.dev/trellis/internal/client"
	"trellis.dev/trellis/internal/tlsutil"
)

// This file is the one way a command that talks to a server is made.
// Every such command does the same: parse its flags, make the client,
// call, print in the -o format, word the failure. A domain declares only
// what sets its command apart (a ClientCommand) and Env.Command makes the
// cobra command, so that every client command refuses mistakes, prints
// and fails the same way, and a domain's commands can live beside its
// client code rather than in cmd/trellis.

// Env is what commands are built with: the process's streams, environment
// and clock (tests run commands in process with their own), and the client
// flags that the commands talking to a server share.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Getenv         func(string) string
	Now            func() time.Time
	// ClientFlags hold -addr, -token and -tls-ca-file. They are
	// registered on the commands that talk to a server's HTTP API only,
	// so that `trellis server -addr ...` is refused rather than ignored.
	ClientFlags ClientFlags
}

// StdEnv is the Env of the process: its standard streams, its environment
// variables and the wall clock.
func StdEnv() *Env {
	return &Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv, Now: time.Now}
}

// UsageError is a mistake in how a command was called: it exits with
// status 2 and points at the command's --help.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Usage marks err as a mistake in how the command was called; nil stays
// nil, so that a check's result can be passed as it is.
func Usage(err error) error {
	if err == nil {
		return nil
	}
	return UsageError{Err: err}
}

// ClientFlags are the flags of every command that talks to a server's HTTP
// API.
type ClientFlags struct {
	addr   string
	token  string
	caFile string
}

// Register adds -addr, -tls-ca-file and -token to fs.
func (f *ClientFlags) Register(fs *pflag.FlagSet) {
	fs.StringVar(&f.addr, "addr", "", "HTTP address of a Trellis server (env TRELLIS_ADDR; default "+client.DefaultAddr+"); https://HOST:PORT for a server's -https-addr")
	fs.StringVar(&f.caFile, "tls-ca-file", "", "the cluster CA's certificate (PEM) that an https:// server's certificate must be signed by (env TRELLIS_CACERT)")
	f.RegisterToken(fs)
}

// RegisterToken adds -token alone, for the agent and sim, which have their
// own flag for the servers' addresses.
func (f *ClientFlags) RegisterToken(fs *pflag.FlagSet) {
	fs.StringVar(&f.token, "token", "", "ACL token to send (env TRELLIS_TOKEN)")
}

// Token is -token, or else TRELLIS_TOKEN.
func (e *Env) Token() string {
	if e.ClientFlags.token != "" {
		return e.ClientFlags.token
	}
	return e.Getenv("TRELLIS_TOKEN")
}

// NewClient is a client of the server that -addr (or TRELLIS_ADDR) names,
// with the token and CA of the flags. A failure to reach the server is
// worded by Unreachable, whichever call it happens in.
func (e *Env) NewClient() (*client.Client, error) {
	addr := e.ClientFlags.addr
	if addr == "" {
		addr = e.Getenv("TRELLIS_ADDR")
	}
	opts := []client.Option{client.WithToken(e.Token())}
	caFile := e.ClientFlags.caFile
	if caFile == "" {
		caFile = e.Getenv("TRELLIS_CACERT")
	}
	if caFile != "" {
		tc, err := tlsutil.New(tlsutil.Config{CAFile: caFile})
		if err != nil {
			return nil, Usage(err)
		}
		// Only a server of the cluster's CA is accepted, whatever address
		// it is reached at (see tlsutil.OutgoingClientConfig).
		opts = append(opts, client.WithHTTPClient(&http.Client{Transport: &http.Transport{
			Proxy: http.ProxyFromEnvironment, TLSClientConfig: tc.OutgoingClientConfig(),
		}}))
	}
	var base string
	opts = append(opts, client.WithTransportErrors(func(err error) error { return Unreachable(base, err) }))
	c, err := client.New(addr, opts...)
	if err != nil {
		return nil, Usage(fmt.Errorf("-addr: %w", err))
	}
	base = c.Addr()
	return c, nil
}

// unreachableError is a request that could not reach the server, worded
// for a person; it wraps the transport's error.
type unreachableError struct {
	msg string
	err error
}

func (e *unreachableError) Error() string { return e.msg }
func (e *unreachableError) Unwrap() error { return e.err }

// Unreachable rewords a failure to reach the server at addr, saying how to
// point the command elsewhere; other errors pass as they are.
func Unreachable(addr string, err error) error {
	var ue *url.Error
	var oe *net.OpError
	if errors.As(err, &ue) && errors.As(err, &oe) {
		return &unreachableError{
			msg: fmt.Sprintf("cannot reach the Trellis server at %s (is it running? set -addr or TRELLIS_ADDR): %v", addr, oe.Err),
			err: err,
		}
	}
	return err
}

// ClientCommand declares a command that talks to a server's HTTP API by
// what sets it apart; Env.Command makes it. Use, Short, Long, Example and
// Args are cobra's.
type ClientCommand struct {
	Use, Short, Long, Example string
	Args                      cobra.PositionalArgs

	// Flags registers the command's own flags.
	Flags func(fs *pflag.FlagSet)
	// Namespaced commands take -n (help NamespaceHelp, or `namespace
	// (default "default")`); with AllNamespaces also -A, which makes
	// Call.Namespace "*".
	Namespaced, AllNamespaces bool
	NamespaceHelp             string
	// Output commands take -o table|json|yaml.
	Output bool

	// Check refuses what can be refused before any request (a bad flag,
	// a spec file with a mistake), and reads what Run sends; Call.Client
	// is not made yet. A mistake in how the command was called is
	// returned as Usage(err).
	Check func(call *Call) error
	// Run makes the requests and returns what to print. A Run may return
	// both: the result is printed, then the command fails (deploy --wait
	// prints the deployment as it ended, then fails unless it completed).
	Run func(ctx context.Context, call *Call) (Result, error)
}

// Call is one run of a client command.
type Call struct {
	*Env
	Args      []string
	Flags     *pflag.FlagSet // to ask whether a flag was given
	Namespace string         // -n, "*" with -A, "" when not given
	Format    string         // -o: FormatTable, FormatJSON or FormatYAML
	Client    *client.Client // made after Check
}

// Result is what a command prints: Value for -o json and yaml (a wire
// value, or a protobuf message, exactly as the API returned it) and Table
// for people. A command without -o prints only Table.
type Result struct {
	Value any
	Table func(w io.Writer) error
}

// Say is a Result that prints a line of text in the table format.
func Say(format string, args ...any) Result {
	return Result{Table: func(w io.Writer) error {
		_, err := fmt.Fprintf(w, format+"\n", args...)
		return err
	}}
}

// With is r with Value v, for -o json and yaml.
func (r Result) With(v any) Result {
	r.Value = v
	return r
}

// print writes r in format.
func (r Result) print(w io.Writer, format string) error {
	switch {
	case format == FormatTable && r.Table != nil:
		return r.Table(w)
	case format == FormatTable || r.Value == nil:
		return nil
	}
	if m, ok := r.Value.(proto.Message); ok {
		b, err := client.MarshalProto(m)
		if err != nil {
			return err
		}
		return WriteRaw(w, format, b)
	}
	return WriteValue(w, format, r.Value)
}

// OutputFormats are the values of -o.
var OutputFormats = []string{FormatTable, FormatJSON, FormatYAML}

// AddOutputFlag adds -o table|json|yaml, stored in out.
func AddOutputFlag(cmd *cobra.Command, out *string) {
	cmd.Flags().VarP(NewChoice(out, FormatTable, "an output format", OutputFormats...), "output", "o", "output format: table, json or yaml")
}

// ClientAnnotation marks a command that Env.Command made, so that a test
// of the whole tree can check that every command talking to a server is
// one.
const ClientAnnotation = "trellis/client"

// namespaceHelp is what -n says unless a command says otherwise.
const namespaceHelp = `namespace (default "default")`

// Command makes the cobra command that cc declares: it parses the flags,
// checks, makes the client, runs and prints.
func (e *Env) Command(cc ClientCommand) *cobra.Command {
	var namespace, format string
	var all bool
	cmd := &cobra.Command{Use: cc.Use, Short: cc.Short, Long: cc.Long, Example: cc.Example, Args: cc.Args,
		Annotations: map[string]string{ClientAnnotation: "true"}}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		call := &Call{Env: e, Args: args, Flags: cmd.Flags(), Namespace: namespace, Format: FormatTable}
		if cc.Output {
			call.Format = format
		}
		if cc.Check != nil {
			if err := cc.Check(call); err != nil {
				return err
			}
		}
		if all {
			if namespace != "" {
				return Usage(errors.New("-A: give either -A or -n, not both"))
			}
			call.Namespace = "*"
		}
		c, err := e.NewClient()
		if err != nil {
			return err
		}
		call.Client = c
		res, runErr := cc.Run(cmd.Context(), call)
		if err := res.print(e.Stdout, call.Format); err != nil {
			return err
		}
		return runErr
	}
	if cc.Flags != nil {
		cc.Flags(cmd.Flags())
	}
	if cc.Namespaced || cc.AllNamespaces {
		help := cc.NamespaceHelp
		if help == "" {
			help = namespaceHelp
		}
		cmd.Flags().StringVarP(&namespace, "namespace", "n", "", help)
	}
	if cc.AllNamespaces {
		cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "every namespace")
	}
	if cc.Output {
		AddOutputFlag(cmd, &format)
	}
	return cmd
}

// ReadInput reads the file of a -f flag ("-" is standard input) and
// returns it with the name errors should give it.
func (e *Env) ReadInput(file string) (data []byte, name string, err error) {
	if file == "-" {
		data, err = io.ReadAll(e.Stdin)
		name = "stdin"
	} else {
		data, err = os.ReadFile(file)
		name = file
	}
	if err != nil {
		return nil, "", fmt.Errorf("-f: %w", err)
	}
	return data, name, nil
}

// SignalContext is ctx, canceled on Ctrl-C or SIGTERM: a command that
// follows something (a watch, a deployment, logs) ends there normally.
func SignalContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
}
