package command

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/encoding/protojson"

	pbca "trellis.dev/trellis/api/ca/v1"
	"trellis.dev/trellis/internal/ca/caapi"
	"trellis.dev/trellis/internal/cli"
)

// settingsFile is the file of `trellis ca config set -f`: the settings to
// change, as `trellis ca config get` prints them, and optionally the
// version they were read at. Only its shape is used (the JSON sent is the
// file's own, so that a field given as "" or null is sent as given).
type settingsFile struct {
	Version          string  `json:"version"`
	Provider         string  `json:"provider"`
	PrivateKeyType   string  `json:"private_key_type"`
	PrivateKeyBits   int32   `json:"private_key_bits"`
	LeafTTL          string  `json:"leaf_ttl"`
	IntermediateTTL  string  `json:"intermediate_ttl"`
	RootTTL          string  `json:"root_ttl"`
	CSRMaxPerSecond  float64 `json:"csr_max_per_second"`
	CSRMaxConcurrent int32   `json:"csr_max_concurrent"`
	RootCert         string  `json:"root_cert"`
	PrivateKey       string  `json:"private_key"`
	Rotation         uint64  `json:"rotation"`
}

var settingsShape = cli.StructShape(settingsFile{}, "the CA's settings")

func newConfigCmd(e *cli.Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Read or change the Connect CA's configuration",
		Long: `The CA's configuration: its key type and size, the lives of leaves,
intermediates and roots, the signing limits, and an optional root supplied
with its private key. A change of the key type, a new supplied root, or a
raised rotation makes the CA rotate to a new root (see trellis ca rotate).`,
		Example: `  trellis ca config get > ca.yaml
  $EDITOR ca.yaml
  trellis ca config set -f ca.yaml`,
	}
	cmd.AddCommand(newConfigGetCmd(e), newConfigSetCmd(e))
	return cmd
}

func newConfigGetCmd(e *cli.Env) *cobra.Command {
	return e.Command(cli.ClientCommand{
		Use:   "get",
		Short: "Print the CA's configuration and the CA manager's state",
		Long: `Print the CA's settings as a YAML file that trellis ca config set -f takes
back (with the version it was read at, so that the set fails if someone
changed the configuration in between), and the CA manager's state as
comments. A private key is never printed: the key of a supplied root is
stored sealed in the servers.

-o json and -o yaml print the answer of GET /v1/ca/config.`,
		Example: `  trellis ca config get
  trellis ca config get -o json
  trellis ca config get > ca.yaml`,
		Args:   cobra.NoArgs,
		Output: true,
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			var body caapi.ConfigBody
			if err := call.Client.Do(ctx, http.MethodGet, call.Client.URL("/v1/ca/config", nil), nil, &body); err != nil {
				return cli.Result{}, err
			}
			return cli.Result{Value: body, Table: func(w io.Writer) error { return writeSettings(w, body) }}, nil
		},
	})
}

func newConfigSetCmd(e *cli.Env) *cobra.Command {
	var file string
	var raw json.RawMessage
	var version string
	return e.Command(cli.ClientCommand{
		Use:   "set -f FILE",
		Short: "Change the CA's configuration from a YAML or JSON file",
		Long: `Change the CA's configuration. FILE (- for standard input) holds the settings
to change, in YAML or JSON, named as trellis ca config get prints them; the
settings it leaves out keep their values, and a setting given as null takes
its default. With version, the change holds only if the configuration is
still at that version.

Settings: provider (builtin), private_key_type (ec or rsa), private_key_bits
(256 or 384 for ec, 2048 or 4096 for rsa), leaf_ttl (at least 1h, default
72h), intermediate_ttl (default 8760h), root_ttl (default 87600h),
csr_max_per_second, csr_max_concurrent, rotation, and root_cert with
private_key (PEM) to supply a root. A new key type, a new supplied root or a
raised rotation makes the CA rotate to a new root, cross-signed by the old
one; set root_cert to "" (and raise rotation) to go back to a generated root.`,
		Example: `  trellis ca config set -f ca.yaml
  echo 'leaf_ttl: 24h' | trellis ca config set -f -
  printf 'private_key_type: rsa\nprivate_key_bits: 2048\n' | trellis ca config set -f -`,
		Args: cobra.NoArgs,
		Flags: func(fs *pflag.FlagSet) {
			fs.StringVarP(&file, "file", "f", "", "the file of settings, YAML or JSON (- for standard input)")
		},
		Output: true,
		Check: func(call *cli.Call) error {
			if file == "" {
				return cli.Usage(fmt.Errorf("-f: give the file of settings to change (- for standard input)"))
			}
			data, name, err := call.ReadInput(file)
			if err != nil {
				return err
			}
			doc, err := cli.ReadSpecDocument(data, name, settingsShape, cli.SpecKind{What: "the CA's settings", One: "set of settings"})
			if err != nil {
				return err
			}
			var fields map[string]json.RawMessage
			if err := json.Unmarshal(doc.JSON(), &fields); err != nil {
				return err
			}
			if v, ok := fields["version"]; ok {
				if err := json.Unmarshal(v, &version); err != nil {
					return doc.Refuse(fmt.Errorf("version: %w", err), nil)
				}
				delete(fields, "version")
			}
			if len(fields) == 0 {
				return fmt.Errorf("%s: no settings to change", name)
			}
			raw, err = json.Marshal(fields)
			return err
		},
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			var body caapi.ConfigBody
			req := caapi.ConfigRequest{Version: version, Config: raw}
			if err := call.Client.Do(ctx, http.MethodPut, call.Client.URL("/v1/ca/config", nil), req, &body); err != nil {
				return cli.Result{}, err
			}
			return cli.Say("configuration set (version %s); the CA manager applies it on the leader: see trellis ca config get", body.Version).With(body), nil
		},
	})
}

// writeSettings prints the settings as the YAML file set -f takes, the
// manager's report as comments.
func writeSettings(w io.Writer, body caapi.ConfigBody) error {
	var c pbca.CAConfig
	if err := protojson.Unmarshal(body.Config, &c); err != nil {
		return fmt.Errorf("the configuration does not decode: %w", err)
	}
	var b strings.Builder
	b.WriteString("# The Connect CA's configuration: edit, then trellis ca config set -f FILE.\n")
	if len(body.Manager) > 0 {
		var m pbca.CAManagerStatus
		if err := protojson.Unmarshal(body.Manager, &m); err == nil {
			fmt.Fprintf(&b, "# CA manager: %s, %s", m.GetState(), m.GetMessage())
			if m.GetActiveRootId() != "" {
				fmt.Fprintf(&b, "; active root %s", ShortKeyID(m.GetActiveRootId()))
			}
			b.WriteString("\n")
			if m.GetLastError() != "" {
				fmt.Fprintf(&b, "# last error: %s\n", strings.ReplaceAll(m.GetLastError(), "\n", " "))
			}
		}
	}
	fmt.Fprintf(&b, "version: %q\n", body.Version)
	fmt.Fprintf(&b, "provider: %s\n", c.GetProvider())
	fmt.Fprintf(&b, "private_key_type: %s\n", c.GetPrivateKeyType())
	fmt.Fprintf(&b, "private_key_bits: %d\n", c.GetPrivateKeyBits())
	fmt.Fprintf(&b, "leaf_ttl: %s\n", formatDuration(c.GetLeafTtl().AsDuration()))
	fmt.Fprintf(&b, "intermediate_ttl: %s\n", formatDuration(c.GetIntermediateTtl().AsDuration()))
	fmt.Fprintf(&b, "root_ttl: %s\n", formatDuration(c.GetRootTtl().AsDuration()))
	fmt.Fprintf(&b, "csr_max_per_second: %v\n", c.GetCsrMaxPerSecond())
	fmt.Fprintf(&b, "csr_max_concurrent: %d\n", c.GetCsrMaxConcurrent())
	fmt.Fprintf(&b, "rotation: %d\n", c.GetRotation())
	if c.GetRootCert() != "" {
		b.WriteString("# a supplied root (its private key is stored sealed and never shown)\nroot_cert: |\n")
		for _, line := range strings.Split(strings.TrimRight(c.GetRootCert(), "\n"), "\n") {
			b.WriteString("  " + line + "\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// formatDuration writes d as people do: 72h, 90m, 1h30m.
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
