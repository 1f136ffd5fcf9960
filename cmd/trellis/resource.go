package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"

	"github.com/spf13/cobra"

	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/client"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/server"
)

func newResourceCmd(e *env, cf *clientFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "resource",
		Short: "Apply, get, list, delete and watch resources of any type",
		Long: `Work with resources of any registered type through the HTTP API.

TYPE is group/version/kind, for example core/v1/Namespace. Namespaced types
take -n NAMESPACE (default "default"); list and watch take -A for every
namespace. Output is a table unless -o json or -o yaml asks for exactly what
the API returned.`,
		Example: `  trellis resource apply -f namespaces.yaml
  trellis resource list core/v1/Namespace -o yaml`,
	}
	cmd.AddCommand(
		newApplyCmd(e, cf),
		newGetCmd(e, cf),
		newListCmd(e, cf),
		newDeleteCmd(e, cf),
		newWatchCmd(e, cf),
	)
	return cmd
}

// typeTarget checks what list and watch share: the TYPE argument and the
// namespace flags; and makes the client.
func typeTarget(e *env, cf *clientFlags, typeArg, namespace string, all bool) (wire.Type, string, *client.Client, error) {
	typ, err := parseTypeArg(typeArg)
	if err != nil {
		return wire.Type{}, "", nil, err
	}
	ns, err := namespaceFlag(namespace, all)
	if err != nil {
		return wire.Type{}, "", nil, err
	}
	c, err := cf.client(e)
	if err != nil {
		return wire.Type{}, "", nil, err
	}
	return typ, ns, c, nil
}

func parseTypeArg(s string) (wire.Type, error) {
	t, err := wire.ParseType(s)
	if err != nil {
		return t, usageError{fmt.Errorf("TYPE: %q is not group/version/kind (for example core/v1/Namespace)", s)}
	}
	return t, nil
}

// serverError rewords a failure to reach the server; the server's own
// errors pass through as it worded them.
func serverError(c *client.Client, err error) error {
	var ae *client.APIError
	if errors.As(err, &ae) {
		return err
	}
	var ue *url.Error
	var oe *net.OpError
	if errors.As(err, &ue) && errors.As(err, &oe) {
		return fmt.Errorf("cannot reach the Trellis server at %s (is it running? set -addr or TRELLIS_ADDR): %v", c.Addr(), oe.Err)
	}
	return err
}

func newApplyCmd(e *env, cf *clientFlags) *cobra.Command {
	var (
		file   string
		out    string
		atomic bool
	)
	cmd := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Create or update the resources described in a YAML or JSON file",
		Long: `Create or update every resource described in FILE ("-" reads standard input).

A file holds one or many documents, YAML or JSON, separated by lines of "---".
Each document is one resource:

  type: core/v1/Namespace        # group/version/kind (required)
  name: payments                 # (required)
  namespace: default             # namespaced types only; default "default"
  metadata: {team: payments}     # labels (optional)
  version: "42"                  # write only if the stored version is still 42 (optional)
  owner: {...}                   # the id of the owning resource (optional)
  data:                          # the type's fields
    description: services of the payments team

The whole file is checked before anything is written: every document's
fields and, for the types this trellis knows, its data and the checks the
server makes before it writes (names, labels, each type's own rules); a
mistake in the last document writes none of them. Documents are then written
in order, each on its own; if the server still refuses one (say, its
namespace does not exist), the error names it and says how many before it
were applied. With --atomic all of them are written in one batch, all or none.

` + specRulesHelp,
		Example: `  trellis resource apply -f namespaces.yaml
  echo '{type: core/v1/Namespace, name: demo}' | trellis resource apply -f -
  trellis resource apply --atomic -f many.yaml -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return usageError{errors.New("-f: required: the file to apply, or - for standard input")}
			}
			docs, err := readDocuments(e, file)
			if err != nil {
				return err
			}
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			applied, err := applyDocuments(cmd.Context(), c, docs, atomic, out == cli.FormatTable, e.stdout)
			if err != nil {
				return err
			}
			if out != cli.FormatTable {
				return cli.WriteValue(e.stdout, out, wire.ListResponse{Resources: applied})
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "file to apply (YAML or JSON; - for standard input)")
	cmd.Flags().BoolVar(&atomic, "atomic", false, "write every document in one batch: all or none")
	addOutputFlag(cmd, &out)
	return cmd
}

func readDocuments(e *env, file string) ([]cli.Document, error) {
	data, name, err := readInput(e, file)
	if err != nil {
		return nil, err
	}
	return cli.ParseDocuments(data, name, server.Types())
}

// readInput reads the file of a -f flag ("-" is standard input) and
// returns it with the name errors should give it.
func readInput(e *env, file string) (data []byte, name string, err error) {
	if file == "-" {
		data, err = io.ReadAll(e.stdin)
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

func applyDocuments(ctx context.Context, c *client.Client, docs []cli.Document, atomic, report bool, w io.Writer) ([]*wire.Resource, error) {
	if atomic {
		batch := make([]wire.Document, len(docs))
		for i, d := range docs {
			batch[i] = d.Document
		}
		applied, err := c.WriteBatch(ctx, batch)
		if err != nil {
			return nil, serverError(c, err)
		}
		if report {
			for _, r := range applied {
				fmt.Fprintf(w, "%s applied (version %s, generation %s)\n", describe(r), r.Version, r.Generation)
			}
		}
		return applied, nil
	}
	applied := make([]*wire.Resource, 0, len(docs))
	for _, d := range docs {
		r, err := c.Apply(ctx, d.Document)
		if err != nil {
			err = fmt.Errorf("%s: %s %s: %w", d.Source, d.Type, d.Name, serverError(c, err))
			if len(applied) > 0 {
				err = fmt.Errorf("%w (the %d documents before it were applied)", err, len(applied))
			}
			return nil, err
		}
		applied = append(applied, r)
		if report {
			fmt.Fprintf(w, "%s applied (version %s, generation %s)\n", describe(r), r.Version, r.Generation)
		}
	}
	return applied, nil
}

// describe names a resource as type/[namespace/]name.
func describe(r *wire.Resource) string {
	s := r.ID.Type.String() + "/"
	if r.ID.Tenancy.Namespace != "" {
		s += r.ID.Tenancy.Namespace + "/"
	}
	return s + r.ID.Name
}

func newGetCmd(e *env, cf *clientFlags) *cobra.Command {
	var (
		namespace  string
		out        string
		consistent bool
	)
	cmd := &cobra.Command{
		Use:   "get TYPE NAME",
		Short: "Show one resource",
		Example: `  trellis resource get core/v1/Namespace payments
  trellis resource get core/v1/Namespace payments -o json`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			typ, err := parseTypeArg(args[0])
			if err != nil {
				return err
			}
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			r, err := c.Read(cmd.Context(), client.Ref{Type: typ, Namespace: namespace, Name: args[1]}, consistent)
			if err != nil {
				return serverError(c, err)
			}
			if out == cli.FormatTable {
				return cli.WriteTable(e.stdout, []*wire.Resource{r}, e.now())
			}
			return cli.WriteValue(e.stdout, out, r)
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", `namespace of a namespaced type (default "default")`)
	cmd.Flags().BoolVar(&consistent, "consistent", false, "read from the leader (a strong read)")
	addOutputFlag(cmd, &out)
	return cmd
}

func newListCmd(e *env, cf *clientFlags) *cobra.Command {
	var (
		namespace  string
		all        bool
		prefix     string
		out        string
		consistent bool
	)
	cmd := &cobra.Command{
		Use:   "list TYPE",
		Short: "List the resources of a type",
		Example: `  trellis resource list core/v1/Namespace
  trellis resource list core/v1/Namespace --prefix pay -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			typ, ns, c, err := typeTarget(e, cf, args[0], namespace, all)
			if err != nil {
				return err
			}
			list, err := c.List(cmd.Context(), typ, client.ListOptions{Namespace: ns, Prefix: prefix, Consistent: consistent})
			if err != nil {
				return serverError(c, err)
			}
			if out == cli.FormatTable {
				if len(list) == 0 {
					fmt.Fprintf(e.stdout, "No %s resources.\n", typ)
					return nil
				}
				return cli.WriteTable(e.stdout, list, e.now())
			}
			return cli.WriteValue(e.stdout, out, wire.ListResponse{Resources: list})
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", `namespace of a namespaced type (default "default")`)
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "every namespace")
	cmd.Flags().StringVar(&prefix, "prefix", "", "only names that start with this")
	cmd.Flags().BoolVar(&consistent, "consistent", false, "read from the leader (a strong read)")
	addOutputFlag(cmd, &out)
	return cmd
}

func namespaceFlag(namespace string, all bool) (string, error) {
	if all {
		if namespace != "" {
			return "", usageError{errors.New("-A: give either -A or -n, not both")}
		}
		return "*", nil
	}
	return namespace, nil
}

func newDeleteCmd(e *env, cf *clientFlags) *cobra.Command {
	var namespace, version string
	cmd := &cobra.Command{
		Use:   "delete TYPE NAME",
		Short: "Delete a resource (deleting one that is not there is not an error)",
		Example: `  trellis resource delete core/v1/Namespace payments
  trellis resource delete core/v1/Namespace payments --version 42   # only if unchanged since version 42`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			typ, err := parseTypeArg(args[0])
			if err != nil {
				return err
			}
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			ref := client.Ref{Type: typ, Namespace: namespace, Name: args[1]}
			if err := c.Delete(cmd.Context(), ref, version); err != nil {
				return serverError(c, err)
			}
			fmt.Fprintf(e.stdout, "%s/%s deleted\n", typ, args[1])
			return nil
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", `namespace of a namespaced type (default "default")`)
	cmd.Flags().StringVar(&version, "version", "", "delete only if the stored version is this one")
	return cmd
}

func newWatchCmd(e *env, cf *clientFlags) *cobra.Command {
	var (
		namespace string
		all       bool
		prefix    string
		out       string
		index     uint64
	)
	cmd := &cobra.Command{
		Use:   "watch TYPE",
		Short: "Print the resources of a type, then every change to them, until Ctrl-C",
		Long: `Print an event for every resource of TYPE that exists now, a marker at the
end of that snapshot, and then an event for every change, as it happens.

With -o json each event is printed as the API sends it, one JSON object per
line: {"op":"upsert"|"delete"|"end_of_snapshot","resource":{...},"index":N}.
--index N resumes after index N instead of starting with a snapshot.`,
		Example: `  trellis resource watch core/v1/Namespace
  trellis resource watch core/v1/Namespace -o json --index 42`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			typ, ns, c, err := typeTarget(e, cf, args[0], namespace, all)
			if err != nil {
				return err
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			return watchEvents(ctx, c, typ, client.ListOptions{Namespace: ns, Prefix: prefix, Index: index}, out, e.stdout)
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", `namespace of a namespaced type (default "default")`)
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "every namespace")
	cmd.Flags().StringVar(&prefix, "prefix", "", "only names that start with this")
	cmd.Flags().Uint64Var(&index, "index", 0, "resume after this index (from an earlier watch) instead of starting with a snapshot")
	addOutputFlag(cmd, &out)
	return cmd
}

func watchEvents(ctx context.Context, c *client.Client, typ wire.Type, opts client.ListOptions, out string, w io.Writer) error {
	watch, err := c.Watch(ctx, typ, opts)
	if err != nil {
		return serverError(c, err)
	}
	defer watch.Close()
	if out == cli.FormatTable {
		if err := cli.WriteEventHeader(w); err != nil {
			return err
		}
	}
	for {
		ev, raw, err := watch.NextRaw()
		if err != nil {
			if ctx.Err() != nil {
				return nil // Ctrl-C: a normal end
			}
			if errors.Is(err, client.ErrWatchClosed) {
				return fmt.Errorf("the server closed the watch (resume with --index %d)", watch.Last)
			}
			if client.IsCode(err, wire.CodeGone) {
				return fmt.Errorf("%w (list again, then watch)", err)
			}
			return fmt.Errorf("%w (resume with --index %d)", serverError(c, err), watch.Last)
		}
		switch out {
		case cli.FormatJSON:
			_, err = w.Write(append(raw, '\n'))
		case cli.FormatYAML:
			if _, err = io.WriteString(w, "---\n"); err == nil {
				err = cli.WriteRaw(w, cli.FormatYAML, json.RawMessage(raw))
			}
		default:
			err = cli.WriteEventRow(w, ev)
		}
		if err != nil {
			return err
		}
	}
}
