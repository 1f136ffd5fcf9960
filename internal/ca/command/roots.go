package command

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"trellis.dev/trellis/internal/ca/caapi"
	"trellis.dev/trellis/internal/cli"
)

func newRootsCmd(e *cli.Env) *cobra.Command {
	var pem bool
	cmd := e.Command(cli.ClientCommand{
		Use:   "roots",
		Short: "List the CA's roots (the active one first), or print them as a PEM bundle",
		Long: `List the CA's roots: the trust domain, and for each root its key id, whether it
is the one that signs, and when it expires. A root that was rotated out stays
listed until it is pruned, so that certificates it signed still verify. The
table shortens each key id to its first four and last three bytes; -o json
prints it whole.

--pem prints every root and the intermediates leaves carry, as PEM: the bundle
a peer trusts (openssl verify -CAfile, a proxy's trust store).`,
		Example: `  trellis ca roots
  trellis ca roots -o json
  trellis ca roots --pem > roots.pem`,
		Args:   cobra.NoArgs,
		Output: true,
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			var body caapi.RootsBody
			if err := call.Client.Do(ctx, http.MethodGet, call.Client.URL("/v1/ca/roots", nil), nil, &body); err != nil {
				return cli.Result{}, err
			}
			if pem {
				return cli.Result{Table: func(w io.Writer) error { return writeBundle(w, body) }}, nil
			}
			return cli.Result{Value: body, Table: func(w io.Writer) error { return writeRoots(w, body, time.Now()) }}, nil
		},
	})
	cmd.Flags().BoolVar(&pem, "pem", false, "print the roots and their intermediates as one PEM bundle")
	cmd.MarkFlagsMutuallyExclusive("pem", "output")
	return cmd
}

// writeRoots prints the trust domain and a table of the roots.
func writeRoots(w io.Writer, body caapi.RootsBody, now time.Time) error {
	fmt.Fprintf(w, "Trust domain: %s\n\n", body.TrustDomain)
	if len(body.Roots) == 0 {
		_, err := fmt.Fprintln(w, "No roots yet: the leader makes one when it starts (see GET /v1/ca/config for why it has not).")
		return err
	}
	tw := cli.NewTable(w)
	fmt.Fprintln(tw, "NAME\tACTIVE\tEXPIRES\tKEY ID")
	for _, r := range body.Roots {
		active := "no"
		if r.Active {
			active = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Name, active, expires(r.NotAfter, now), ShortKeyID(r.ID))
	}
	return tw.Flush()
}

// expires says when a root expires, and in how long.
func expires(at *time.Time, now time.Time) string {
	if at == nil {
		return "-"
	}
	return fmt.Sprintf("%s (in %s)", at.UTC().Format(time.DateOnly), cli.FormatAge(at.Sub(now)))
}

// writeBundle prints every root, then the intermediates, as PEM.
func writeBundle(w io.Writer, body caapi.RootsBody) error {
	var b strings.Builder
	for _, r := range body.Roots {
		b.WriteString(strings.TrimRight(r.RootCert, "\n") + "\n")
	}
	for _, r := range body.Roots {
		for _, c := range r.IntermediateCerts {
			b.WriteString(strings.TrimRight(c, "\n") + "\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
