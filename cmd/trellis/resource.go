package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/client"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/server"
)

func newResourceCmd(e *cli.Env) *cobra.Command {
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
		newApplyCmd(e),
		newGetCmd(e),
		newListCmd(e),
		newDeleteCmd(e),
		newWatchCmd(e),
	)
	return cmd
}

// namespaceOfType is what -n says on the resource commands, which take
// types of either scope.
const namespaceOfType = `namespace of a namespaced type (default "default")`

func parseTypeArg(s string) (wire.Type, error) {
	t, err := wire.ParseType(s)
	if err != nil {
		return t, cli.Usage(fmt.Errorf("TYPE: %q is not group/version/kind (for example core/v1/Namespace)", s))
	}
	return t, nil
}

func newApplyCmd(e *cli.Env) *cobra.Command {
	var (
		file   string
		atomic bool
		docs   []cli.Document
	)
	return e.Command(cli.ClientCommand{
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

` + cli.SpecRulesHelp,
		Example: `  trellis resource apply -f namespaces.yaml
  echo '{type: core/v1/Namespace, name: demo}' | trellis resource apply -f -
  trellis resource apply --atomic -f many.yaml -o json`,
		Args: cobra.NoArgs,
		Flags: func(fs *pflag.FlagSet) {
			fs.StringVarP(&file, "filename", "f", "", "file to apply (YAML or JSON; - for standard input)")
			fs.BoolVar(&atomic, "atomic", false, "write every document in one batch: all or none")
		},
		Output: true,
		Check: func(call *cli.Call) error {
			if file == "" {
				return cli.Usage(errors.New("-f: required: the file to apply, or - for standard input"))
			}
			data, name, err := call.ReadInput(file)
			if err != nil {
				return err
			}
			docs, err = cli.ParseDocuments(data, name, server.Types())
			return err
		},
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			applied, err := applyDocuments(ctx, call.Client, docs, atomic, call.Format == cli.FormatTable, call.Stdout)
			if err != nil {
				return cli.Result{}, err
			}
			return cli.Result{Value: wire.ListResponse{Resources: applied}}, nil
		},
	})
}

func applyDocuments(ctx context.Context, c *client.Client, docs []cli.Document, atomic, report bool, w io.Writer) ([]*wire.Resource, error) {
	if atomic {
		batch := make([]wire.Document, len(docs))
		for i, d := range docs {
			batch[i] = d.Document
		}
		applied, err := c.WriteBatch(ctx, batch)
		if err != nil {
			return nil, err
		}
		if report {
			for _, r := range applied {
				fmt.Fprintf(w, "%s applied (version %s, generation %s)\n", cli.Describe(r), r.Version, r.Generation)
			}
		}
		return applied, nil
	}
	applied := make([]*wire.Resource, 0, len(docs))
	for _, d := range docs {
		r, err := c.Apply(ctx, d.Document)
		if err != nil {
			err = fmt.Errorf("%s: %s %s: %w", d.Source, d.Type, d.Name, err)
			if len(applied) > 0 {
				err = fmt.Errorf("%w (the %d documents before it were applied)", err, len(applied))
			}
			return nil, err
		}
		applied = append(applied, r)
		if report {
			fmt.Fprintf(w, "%s applied (version %s, generation %s)\n", cli.Describe(r), r.Version, r.Generation)
		}
	}
	return applied, nil
}

func newGetCmd(e *cli.Env) *cobra.Command {
	var consistent bool
	var typ wire.Type
	return e.Command(cli.ClientCommand{
		Use:   "get TYPE NAME",
		Short: "Show one resource",
		Example: `  trellis resource get core/v1/Namespace payments
  trellis resource get core/v1/Namespace payments -o json`,
		Args: cobra.ExactArgs(2),
		Flags: func(fs *pflag.FlagSet) {
			fs.BoolVar(&consistent, "consistent", false, "read from the leader (a strong read)")
		},
		Namespaced: true, NamespaceHelp: namespaceOfType, Output: true,
		Check: func(call *cli.Call) (err error) {
			typ, err = parseTypeArg(call.Args[0])
			return err
		},
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			r, err := call.Client.Read(ctx, client.Ref{Type: typ, Namespace: call.Namespace, Name: call.Args[1]}, consistent)
			if err != nil {
				return cli.Result{}, err
			}
			return cli.Result{Value: r, Table: func(w io.Writer) error { return cli.WriteTable(w, []*wire.Resource{r}, call.Now()) }}, nil
		},
	})
}

func newListCmd(e *cli.Env) *cobra.Command {
	var (
		prefix     string
		consistent bool
		typ        wire.Type
	)
	return e.Command(cli.ClientCommand{
		Use:   "list TYPE",
		Short: "List the resources of a type",
		Example: `  trellis resource list core/v1/Namespace
  trellis resource list core/v1/Namespace --prefix pay -o json`,
		Args: cobra.ExactArgs(1),
		Flags: func(fs *pflag.FlagSet) {
			fs.StringVar(&prefix, "prefix", "", "only names that start with this")
			fs.BoolVar(&consistent, "consistent", false, "read from the leader (a strong read)")
		},
		AllNamespaces: true, NamespaceHelp: namespaceOfType, Output: true,
		Check: func(call *cli.Call) (err error) {
			typ, err = parseTypeArg(call.Args[0])
			return err
		},
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			list, err := call.Client.List(ctx, typ, client.ListOptions{Namespace: call.Namespace, Prefix: prefix, Consistent: consistent})
			if err != nil {
				return cli.Result{}, err
			}
			if len(list) == 0 {
				return cli.Say("No %s resources.", typ).With(wire.ListResponse{Resources: list}), nil
			}
			return cli.Result{Value: wire.ListResponse{Resources: list}, Table: func(w io.Writer) error { return cli.WriteTable(w, list, call.Now()) }}, nil
		},
	})
}

func newDeleteCmd(e *cli.Env) *cobra.Command {
	var version string
	var typ wire.Type
	return e.Command(cli.ClientCommand{
		Use:   "delete TYPE NAME",
		Short: "Delete a resource (deleting one that is not there is not an error)",
		Example: `  trellis resource delete core/v1/Namespace payments
  trellis resource delete core/v1/Namespace payments --version 42   # only if unchanged since version 42`,
		Args: cobra.ExactArgs(2),
		Flags: func(fs *pflag.FlagSet) {
			fs.StringVar(&version, "version", "", "delete only if the stored version is this one")
		},
		Namespaced: true, NamespaceHelp: namespaceOfType,
		Check: func(call *cli.Call) (err error) {
			typ, err = parseTypeArg(call.Args[0])
			return err
		},
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			ref := client.Ref{Type: typ, Namespace: call.Namespace, Name: call.Args[1]}
			if err := call.Client.Delete(ctx, ref, version); err != nil {
				return cli.Result{}, err
			}
			return cli.Say("%s/%s deleted", typ, call.Args[1]), nil
		},
	})
}

func newWatchCmd(e *cli.Env) *cobra.Command {
	var (
		prefix string
		index  uint64
		typ    wire.Type
	)
	return e.Command(cli.ClientCommand{
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
		Flags: func(fs *pflag.FlagSet) {
			fs.StringVar(&prefix, "prefix", "", "only names that start with this")
			fs.Uint64Var(&index, "index", 0, "resume after this index (from an earlier watch) instead of starting with a snapshot")
		},
		AllNamespaces: true, NamespaceHelp: namespaceOfType, Output: true,
		Check: func(call *cli.Call) (err error) {
			typ, err = parseTypeArg(call.Args[0])
			return err
		},
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			ctx, stop := cli.SignalContext(ctx)
			defer stop()
			return cli.Result{}, watchEvents(ctx, call.Client, typ, client.ListOptions{Namespace: call.Namespace, Prefix: prefix, Index: index}, call.Format, call.Stdout)
		},
	})
}

func watchEvents(ctx context.Context, c *client.Client, typ wire.Type, opts client.ListOptions, out string, w io.Writer) error {
	watch, err := c.Watch(ctx, typ, opts)
	if err != nil {
		return err
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
			return fmt.Errorf("%w (resume with --index %d)", err, watch.Last)
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
