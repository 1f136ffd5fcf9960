package command

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	pbmesh "trellis.dev/trellis/api/mesh/v1"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/client"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/mesh"
)

// row is one source's rule of one destination, as list prints it.
type row struct {
	dest   mesh.Service
	source *pbmesh.IntentionSource
}

func (r row) precedence() int {
	return mesh.Precedence(r.dest, mesh.Service{Namespace: r.source.GetNamespace(), Name: r.source.GetName()})
}

func newListCmd(e *cli.Env) *cobra.Command {
	return e.Command(cli.ClientCommand{
		Use:   "list [DST]",
		Short: "List the intentions: every source's rule of every destination",
		Long: `List the intentions of the namespace (-n, "default" by default; -A for every
namespace), or of one destination DST: a line per source, the most specific
first within a destination, with its precedence (9: every name exact, down to
1: every name "*"; the highest that names a caller decides).

-o json and -o yaml print the mesh/v1/Intentions resources as the API
returns them.`,
		Example: `  trellis intention list
  trellis intention list api
  trellis intention list -A
  trellis intention list -o yaml`,
		Args:          cobra.MaximumNArgs(1),
		AllNamespaces: true, Output: true,
		NamespaceHelp: `namespace of the destinations (default "default")`,
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			ns := namespaceOr(call.Namespace)
			var list []*wire.Resource
			if len(call.Args) == 1 {
				if ns == "*" {
					return cli.Result{}, cli.Usage(fmt.Errorf("-A lists every destination: give DST with -n, or no DST"))
				}
				r, _, err := readIntentions(ctx, call.Client, ns, call.Args[0])
				if err != nil {
					return cli.Result{}, err
				}
				if r != nil {
					list = append(list, r)
				}
			} else {
				var err error
				if list, err = call.Client.List(ctx, intentionsWire, client.ListOptions{Namespace: ns}); err != nil {
					return cli.Result{}, err
				}
			}
			var rows []row
			for _, r := range list {
				var in pbmesh.Intentions
				if err := cli.DecodeData(r, &in); err != nil {
					return cli.Result{}, err
				}
				dest := mesh.Service{Namespace: namespaceOr(r.ID.Tenancy.Namespace), Name: r.ID.Name}
				for _, s := range in.GetSources() {
					rows = append(rows, row{dest: dest, source: s})
				}
			}
			sort.SliceStable(rows, func(i, j int) bool {
				a, b := rows[i], rows[j]
				if a.dest != b.dest {
					return a.dest.String() < b.dest.String()
				}
				return a.precedence() > b.precedence()
			})
			return cli.Result{Value: cli.ResourceList(list, false), Table: func(w io.Writer) error { return writeRows(w, rows, len(call.Args) == 1) }}, nil
		},
	})
}

func writeRows(w io.Writer, rows []row, one bool) error {
	if len(rows) == 0 {
		what := "No intentions"
		if one {
			what = "No intentions name this destination"
		}
		_, err := fmt.Fprintln(w, what+": the mesh's default action decides every call (trellis intention check SRC DST shows it).")
		return err
	}
	tw := cli.NewTable(w)
	fmt.Fprintln(tw, "DESTINATION\tSOURCE\tACTION\tPRECEDENCE\tDESCRIPTION")
	for _, r := range rows {
		desc := r.source.GetDescription()
		if desc == "" {
			desc = "-"
		}
		fmt.Fprintf(tw, "%s\t%s/%s\t%s\t%d\t%s\n", r.dest, r.source.GetNamespace(), r.source.GetName(), describeRule(r.source), r.precedence(), desc)
	}
	return tw.Flush()
}

func newGetCmd(e *cli.Env) *cobra.Command {
	var sourceNS string
	return e.Command(cli.ClientCommand{
		Use:   "get SRC DST",
		Short: "Show the rule of the destination DST for the source SRC",
		Long: `Show the rule that the Intentions of DST (in -n, "default" by default) hold
for SRC (in --source-namespace, DST's namespace unless given): its action or
its L7 permissions in the order they are evaluated, its precedence and its
description.

-o json and -o yaml print the source as it is stored.`,
		Example: `  trellis intention get web api
  trellis intention get '*' api --source-namespace '*'
  trellis intention get admin api -o yaml`,
		Args:       cobra.ExactArgs(2),
		Namespaced: true, Output: true,
		NamespaceHelp: `namespace of DST (default "default")`,
		Flags: func(fs *pflag.FlagSet) {
			fs.StringVar(&sourceNS, "source-namespace", "", `namespace of SRC, or "*" (default: DST's)`)
		},
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			ns, dest := namespaceOr(call.Namespace), call.Args[1]
			srcNS := sourceNS
			if srcNS == "" {
				srcNS = ns
			}
			_, in, err := readIntentions(ctx, call.Client, ns, dest)
			if err != nil {
				return cli.Result{}, err
			}
			i := sourceIndex(in, srcNS, call.Args[0])
			if i < 0 {
				return cli.Result{}, fmt.Errorf("%s/%s has no rule for %s/%s (trellis intention list %s -n %s lists its rules)", ns, dest, srcNS, call.Args[0], dest, ns)
			}
			s := in.GetSources()[i]
			r := row{dest: mesh.Service{Namespace: ns, Name: dest}, source: s}
			return cli.Result{Value: s, Table: func(w io.Writer) error { return writeRule(w, r) }}, nil
		},
	})
}

func writeRule(w io.Writer, r row) error {
	s := r.source
	fmt.Fprintf(w, "Source:       %s/%s\n", s.GetNamespace(), s.GetName())
	fmt.Fprintf(w, "Destination:  %s\n", r.dest)
	fmt.Fprintf(w, "Precedence:   %d\n", r.precedence())
	if d := s.GetDescription(); d != "" {
		fmt.Fprintf(w, "Description:  %s\n", d)
	}
	if len(s.GetPermissions()) == 0 {
		_, err := fmt.Fprintf(w, "Action:       %s\n", s.GetAction())
		return err
	}
	fmt.Fprintln(w, "Permissions (in order; the first that matches decides, none: the default action):")
	for i, p := range s.GetPermissions() {
		fmt.Fprintf(w, "  %d. %s %s\n", i, p.GetAction(), describeMatch(p.GetHttp()))
	}
	return nil
}

// describeMatch says what an HTTP match matches.
func describeMatch(h *pbmesh.IntentionHTTPMatch) string {
	var parts []string
	switch {
	case h.GetPathExact() != "":
		parts = append(parts, "path "+h.GetPathExact())
	case h.GetPathPrefix() != "":
		parts = append(parts, "path prefix "+h.GetPathPrefix())
	case h.GetPathRegex() != "":
		parts = append(parts, "path matching "+h.GetPathRegex())
	}
	if m := h.GetMethods(); len(m) > 0 {
		parts = append(parts, "methods "+strings.Join(m, ","))
	}
	for _, x := range h.GetHeaders() {
		var what string
		switch {
		case x.GetPresent():
			what = "present"
		case x.GetExact() != "":
			what = "= " + x.GetExact()
		case x.GetPrefix() != "":
			what = "prefix " + x.GetPrefix()
		case x.GetSuffix() != "":
			what = "suffix " + x.GetSuffix()
		case x.GetRegex() != "":
			what = "matching " + x.GetRegex()
		}
		not := ""
		if x.GetInvert() {
			not = "not "
		}
		parts = append(parts, fmt.Sprintf("header %s %s%s", x.GetName(), not, what))
	}
	return strings.Join(parts, ", ")
}
