package command

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/mesh"
	"trellis.dev/trellis/internal/resource"
)

// CheckResult is what `trellis intention check -o json` prints.
type CheckResult struct {
	Allowed     bool   `json:"allowed"`
	Source      string `json:"source"`
	Destination string `json:"destination"`
	// ByDefault says the mesh's default action decided.
	ByDefault     bool   `json:"by_default"`
	DefaultAction string `json:"default_action"`
	// Rule is the most specific rule naming the source, when one does.
	Rule   *CheckRule `json:"rule,omitempty"`
	Reason string     `json:"reason"`
}

// CheckRule names the rule that decided.
type CheckRule struct {
	Destination string `json:"destination"`
	Source      string `json:"source"`
	Precedence  int    `json:"precedence"`
	// Permission is the index of the L7 permission that decided; absent
	// when the source's action did.
	Permission *int `json:"permission,omitempty"`
	PerRequest bool `json:"per_request,omitempty"`
}

func newCheckCmd(e *cli.Env) *cobra.Command {
	var sourceNS, path, method string
	var headers []string
	return e.Command(cli.ClientCommand{
		Use:   "check SRC DST",
		Short: "Say whether SRC may call DST, and which intention (or the default) decides",
		Long: `Decide, as a proxy of DST would, whether the service SRC (in --source-namespace,
DST's namespace unless given) may call DST (in -n, "default" by default), and
say which rule decided: the most specific intention that names SRC, one of its
L7 permissions, or the mesh's default action.

Without --path, --method or --header it asks about a connection: a source
with L7 permissions may connect, and each of its requests is decided by them
(unless DST's catalog Service speaks tcp: nothing would enforce them, so the
connection is denied).
With any of them it asks about one HTTP request (method GET and path / unless
given).

The exit status is 0 when allowed, 1 when denied.`,
		Example: `  trellis intention check web api
  trellis intention check admin api --path /admin/users --method DELETE
  trellis intention check web api --path /v1/items --header x-team=payments
  trellis intention check billing api --source-namespace payments -o json`,
		Args:       cobra.ExactArgs(2),
		Namespaced: true, Output: true,
		NamespaceHelp: `namespace of DST (default "default")`,
		Flags: func(fs *pflag.FlagSet) {
			fs.StringVar(&sourceNS, "source-namespace", "", "namespace of SRC (default: DST's)")
			fs.StringVar(&path, "path", "", "the request's path (asks about an HTTP request)")
			fs.StringVar(&method, "method", "", "the request's method (asks about an HTTP request)")
			fs.StringArrayVar(&headers, "header", nil, "a request header, NAME=VALUE (repeat for more)")
		},
		Check: func(call *cli.Call) error {
			for i, a := range call.Args {
				if !resource.IsDNSLabel(a) {
					return cli.Usage(fmt.Errorf("%s %q: give one service by name (a lowercase DNS label): check asks about a call of one service to another", []string{"SRC", "DST"}[i], a))
				}
			}
			if sourceNS != "" && !resource.IsDNSLabel(sourceNS) {
				return cli.Usage(fmt.Errorf("--source-namespace %q: give one namespace by name", sourceNS))
			}
			if path != "" && !strings.HasPrefix(path, "/") {
				return cli.Usage(fmt.Errorf("--path %q: a request's path begins with /", path))
			}
			for _, h := range headers {
				if name, _, ok := strings.Cut(h, "="); !ok || name == "" {
					return cli.Usage(fmt.Errorf("--header %q: give NAME=VALUE", h))
				}
			}
			return nil
		},
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			ns, dest := namespaceOr(call.Namespace), call.Args[1]
			srcNS := sourceNS
			if srcNS == "" {
				srcNS = ns
			}
			def, err := readDefaultAction(ctx, call.Client)
			if err != nil {
				return cli.Result{}, err
			}
			r, _, err := readIntentions(ctx, call.Client, ns, dest)
			if err != nil {
				return cli.Result{}, err
			}
			var set []mesh.Intentions
			if r != nil {
				in, err := intentionsOf(r)
				if err != nil {
					return cli.Result{}, err
				}
				set = append(set, in)
			}
			protocol, err := readProtocol(ctx, call.Client, ns, dest)
			if err != nil {
				return cli.Result{}, err
			}
			asksHTTP := path != "" || method != "" || len(headers) > 0
			if asksHTTP && protocol != "" && !mesh.SpeaksHTTP(protocol) {
				return cli.Result{}, cli.Usage(fmt.Errorf("--path, --method and --header ask about an HTTP request, but %s/%s speaks %s (its catalog/v1/Service says so): ask about a connection, without them", ns, dest, protocol))
			}
			req := mesh.Request{Source: mesh.Service{Namespace: srcNS, Name: call.Args[0]}, Destination: mesh.Service{Namespace: ns, Name: dest},
				NoHTTP: protocol != "" && !mesh.SpeaksHTTP(protocol)}
			if asksHTTP {
				req.HTTP = &mesh.HTTPRequest{Path: path, Method: strings.ToUpper(method), Header: map[string][]string{}}
				if req.HTTP.Path == "" {
					req.HTTP.Path = "/"
				}
				if req.HTTP.Method == "" {
					req.HTTP.Method = "GET"
				}
				for _, h := range headers {
					name, value, _ := strings.Cut(h, "=")
					req.HTTP.Header[name] = append(req.HTTP.Header[name], value)
				}
			}
			res := checkResult(req, mesh.Decide(req, set, def), def)
			out := cli.Result{Value: res, Table: func(w io.Writer) error { return writeCheck(w, res) }}
			if !res.Allowed {
				// Printed, then failed, so that a script can test the
				// exit status.
				return out, fmt.Errorf("%s → %s is denied", res.Source, res.Destination)
			}
			return out, nil
		},
	})
}

func checkResult(req mesh.Request, d mesh.Decision, def mesh.Action) CheckResult {
	res := CheckResult{Allowed: d.Allowed, Source: req.Source.String(), Destination: req.Destination.String(),
		ByDefault: d.ByDefault, DefaultAction: string(def), Reason: d.Reason}
	if d.Rule != nil {
		res.Rule = &CheckRule{Destination: d.Rule.Destination.String(), Source: d.Rule.Source.String(), Precedence: d.Rule.Precedence, PerRequest: d.Rule.PerRequest}
		if d.Rule.Permission >= 0 {
			p := d.Rule.Permission
			res.Rule.Permission = &p
		}
	}
	return res
}

func writeCheck(w io.Writer, r CheckResult) error {
	verdict := "Denied"
	if r.Allowed {
		verdict = "Allowed"
	}
	fmt.Fprintf(w, "%s: %s → %s\n", verdict, r.Source, r.Destination)
	switch {
	case r.Rule == nil:
		fmt.Fprintf(w, "Decided by: the default action (%s): no intention names %s\n", r.DefaultAction, r.Source)
	case r.ByDefault:
		fmt.Fprintf(w, "Decided by: the default action (%s): no permission of the intention %s → %s (precedence %d) matches\n", r.DefaultAction, r.Rule.Source, r.Rule.Destination, r.Rule.Precedence)
	case r.Rule.Permission != nil:
		fmt.Fprintf(w, "Decided by: permission %d of the intention %s → %s (precedence %d)\n", *r.Rule.Permission, r.Rule.Source, r.Rule.Destination, r.Rule.Precedence)
	default:
		fmt.Fprintf(w, "Decided by: the intention %s → %s (precedence %d)\n", r.Rule.Source, r.Rule.Destination, r.Rule.Precedence)
	}
	_, err := fmt.Fprintf(w, "Why: %s\n", r.Reason)
	return err
}
