package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/types/known/structpb"

	"trellis.dev/trellis/internal/client"
	"trellis.dev/trellis/internal/httpapi/wire"
)

func testEnv(addr string, stdout *bytes.Buffer) *Env {
	vars := map[string]string{"TRELLIS_ADDR": addr}
	return &Env{Stdin: strings.NewReader(""), Stdout: stdout, Stderr: io.Discard, Getenv: func(k string) string { return vars[k] }, Now: time.Now}
}

// runCommand runs cmd with args, as the root would.
func runCommand(e *Env, cmd *cobra.Command, args ...string) error {
	root := &cobra.Command{Use: "trellis", SilenceErrors: true, SilenceUsage: true}
	e.ClientFlags.Register(root.PersistentFlags())
	root.AddCommand(cmd)
	root.SetArgs(append([]string{cmd.Name()}, args...))
	root.SetOut(io.Discard)
	return root.ExecuteContext(context.Background())
}

// A declared command: its check runs before the client is made, its run
// gets the client, the arguments, the namespace and the format, and what
// it returns is printed as the format asks.
func TestClientCommand(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.URL.Path+"?"+r.URL.RawQuery)
		w.Write([]byte(`{"id":{"type":{"group":"core","group_version":"v1","kind":"Namespace"},"name":"a"},"version":"7"}`)) //nolint:errcheck // a test server
	}))
	defer srv.Close()
	var stdout bytes.Buffer
	e := testEnv(srv.URL, &stdout)
	var checked, flag string
	cmd := func() *cobra.Command {
		return e.Command(ClientCommand{
			Use: "get NAME", Short: "get", Args: cobra.ExactArgs(1),
			Flags:         func(fs *pflag.FlagSet) { fs.StringVar(&flag, "flag", "", "a flag") },
			AllNamespaces: true, Output: true,
			Check: func(call *Call) error {
				if call.Client != nil {
					t.Error("the client is made before the check")
				}
				checked = call.Args[0]
				if checked == "bad" {
					return Usage(errors.New("NAME: bad"))
				}
				return nil
			},
			Run: func(ctx context.Context, call *Call) (Result, error) {
				r, err := call.Client.Read(ctx, client.Ref{Type: wire.Type{Group: "core", GroupVersion: "v1", Kind: "Namespace"}, Namespace: call.Namespace, Name: call.Args[0]}, false)
				if err != nil {
					return Result{}, err
				}
				return Say("read %s at version %s (flag %s)", r.ID.Name, r.Version, flag).With(r), nil
			},
		})
	}

	if err := runCommand(e, cmd(), "a", "-n", "prod", "--flag", "x"); err != nil {
		t.Fatal(err)
	}
	if stdout.String() != "read a at version 7 (flag x)\n" || got[0] != "/v1/resources/core/v1/Namespace/a?namespace=prod" {
		t.Fatalf("printed %q after %v", stdout.String(), got)
	}
	stdout.Reset()
	if err := runCommand(e, cmd(), "a", "-A", "-o", "yaml"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "version: \"7\"\n") || got[1] != "/v1/resources/core/v1/Namespace/a?namespace=%2A" {
		t.Fatalf("printed %q after %v", stdout.String(), got)
	}

	// Refusals send nothing.
	var ue UsageError
	if err := runCommand(e, cmd(), "bad"); !errors.As(err, &ue) || err.Error() != "NAME: bad" {
		t.Fatalf("check: %v", err)
	}
	if err := runCommand(e, cmd(), "a", "-A", "-n", "x"); !errors.As(err, &ue) || err.Error() != "-A: give either -A or -n, not both" {
		t.Fatalf("-A and -n: %v", err)
	}
	if err := runCommand(e, cmd(), "a", "--addr", "ftp://x"); !errors.As(err, &ue) || !strings.HasPrefix(err.Error(), "-addr: bad server address") {
		t.Fatalf("-addr: %v", err)
	}
	if len(got) != 2 {
		t.Fatalf("refused commands sent %v", got[2:])
	}
}

// A run may return what to print and an error both: it prints, then fails.
// A protobuf message is printed as the API's JSON.
func TestClientCommandPrintsThenFails(t *testing.T) {
	var stdout bytes.Buffer
	e := testEnv("http://127.0.0.1:1", &stdout)
	msg, err := structpb.NewStruct(map[string]any{"snake_case": "kept"})
	if err != nil {
		t.Fatal(err)
	}
	failed := errors.New("it ended badly")
	cmd := func() *cobra.Command {
		return e.Command(ClientCommand{
			Use: "end", Short: "end", Output: true,
			Run: func(context.Context, *Call) (Result, error) { return Result{Value: msg}, failed },
		})
	}
	if err := runCommand(e, cmd(), "-o", "json"); !errors.Is(err, failed) {
		t.Fatalf("error %v", err)
	}
	if want := "{\n  \"snake_case\": \"kept\"\n}\n"; stdout.String() != want {
		t.Fatalf("printed %q, want %q", stdout.String(), want)
	}
	// In the table format a result without a table prints nothing.
	stdout.Reset()
	if err := runCommand(e, cmd()); !errors.Is(err, failed) || stdout.Len() != 0 {
		t.Fatalf("table: %v, printed %q", err, stdout.String())
	}
}

// A server that cannot be reached is worded the same whichever call
// failed, and only then: the server's own answers pass as they are.
func TestUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	var stdout bytes.Buffer
	e := testEnv(addr, &stdout)
	cmd := e.Command(ClientCommand{
		Use: "peers", Short: "peers",
		Run: func(ctx context.Context, call *Call) (Result, error) {
			_, err := call.Client.RaftPeers(ctx)
			return Result{}, err
		},
	})
	err = runCommand(e, cmd)
	want := "cannot reach the Trellis server at " + addr + " (is it running? set -addr or TRELLIS_ADDR): "
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("got %v\nwant %s...", err, want)
	}

	api := &client.APIError{StatusCode: 404, Message: "not found"}
	if got := Unreachable(addr, api); got != api {
		t.Fatalf("an answer of the server was reworded: %v", got)
	}
}

func TestUsageOfNil(t *testing.T) {
	if Usage(nil) != nil {
		t.Fatal("Usage(nil) is not nil")
	}
}
