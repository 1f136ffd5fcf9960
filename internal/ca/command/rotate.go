package command

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/encoding/protojson"

	pbca "trellis.dev/trellis/api/ca/v1"
	"trellis.dev/trellis/internal/ca/caapi"
	"trellis.dev/trellis/internal/cli"
)

func newRotateCmd(e *cli.Env) *cobra.Command {
	var timeout time.Duration
	return e.Command(cli.ClientCommand{
		Use:   "rotate",
		Short: "Rotate the CA to a new root, cross-signed by the old one",
		Long: `Ask the CA for a new root with the same settings (it raises the
configuration's rotation through PUT /v1/ca/config), wait until the leader
has made it active, and print the old and the new root's ids.

The new root is cross-signed by the old one, and the leaves it signs carry
that certificate in their chain: peers that trust only the old root and
peers that trust only the new one both accept them. The old root stays in
trellis ca roots, no longer active, until it is pruned 2 × leaf_ttl later,
when no leaf it signed can still be valid.

A CA that signs with a supplied root rotates by being given a new one:
trellis ca config set with root_cert and private_key.`,
		Example: `  trellis ca rotate
  trellis ca rotate && trellis ca roots`,
		Args: cobra.NoArgs,
		Flags: func(fs *pflag.FlagSet) {
			fs.DurationVar(&timeout, "timeout", time.Minute, "how long to wait for the new root to become active")
		},
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			rootsURL := func(index uint64) string {
				if index == 0 {
					return call.Client.URL("/v1/ca/roots", nil)
				}
				return call.Client.URL("/v1/ca/roots", url.Values{"index": {strconv.FormatUint(index, 10)}, "wait": {"30s"}})
			}
			var roots caapi.RootsBody
			index, err := call.Client.DoIndexed(ctx, http.MethodGet, rootsURL(0), nil, &roots)
			if err != nil {
				return cli.Result{}, err
			}
			old := roots.ActiveRootID
			if old == "" {
				return cli.Result{}, errors.New("the CA has no active root yet: see trellis ca config get for why")
			}
			var body caapi.ConfigBody
			if err := call.Client.Do(ctx, http.MethodGet, call.Client.URL("/v1/ca/config", nil), nil, &body); err != nil {
				return cli.Result{}, err
			}
			var c pbca.CAConfig
			if err := protojson.Unmarshal(body.Config, &c); err != nil {
				return cli.Result{}, fmt.Errorf("the configuration does not decode: %w", err)
			}
			req := caapi.ConfigRequest{Version: body.Version, Config: fmt.Appendf(nil, `{"rotation": %d}`, c.GetRotation()+1)}
			if err := call.Client.Do(ctx, http.MethodPut, call.Client.URL("/v1/ca/config", nil), req, nil); err != nil {
				return cli.Result{}, err
			}
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			for roots.ActiveRootID == old || roots.ActiveRootID == "" {
				if index, err = call.Client.DoIndexed(ctx, http.MethodGet, rootsURL(index), nil, &roots); err != nil {
					if ctx.Err() != nil {
						return cli.Result{}, fmt.Errorf("rotation %d was asked for, but no new root became active within %s: see trellis ca config get", c.GetRotation()+1, timeout)
					}
					return cli.Result{}, err
				}
			}
			return cli.Say("rotated the CA root\nold root: %s (rotated out; trusted until it is pruned)\nnew root: %s (active)", ShortKeyID(old), ShortKeyID(roots.ActiveRootID)), nil
		},
	})
}
