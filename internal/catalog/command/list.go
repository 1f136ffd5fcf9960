package command

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/client"
)

// serviceRow is one service as list prints it.
type serviceRow struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Protocol  string `json:"protocol"`
	Mesh      bool   `json:"mesh"`
	Instances int    `json:"instances"`
	Passing   int    `json:"passing"`
	Warning   int    `json:"warning"`
	Critical  int    `json:"critical"`
}

func newListCmd(e *cli.Env) *cobra.Command {
	return e.Command(cli.ClientCommand{
		Use:   "list",
		Short: "List the services of a namespace, with how many instances are passing",
		Long: `List the services of the namespace (-n, "default" by default; -A for every
namespace): each catalog/v1/Service and each service an instance names, with
its protocol, whether it is in the mesh, and how many of its instances are
passing, warning and critical (an instance is as healthy as its worst check;
a check nobody has reported yet is critical).

-o json and -o yaml print the same rows.`,
		Example: `  trellis service list
  trellis service list -A
  trellis service list -o json`,
		Args:          cobra.NoArgs,
		AllNamespaces: true, Output: true,
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			rows, err := listServices(ctx, call.Client, namespaceOr(call.Namespace))
			if err != nil {
				return cli.Result{}, err
			}
			return cli.Result{Value: rows, Table: func(w io.Writer) error { return writeServices(w, rows, call.Namespace == "*") }}, nil
		},
	})
}

func listServices(ctx context.Context, c *client.Client, ns string) ([]serviceRow, error) {
	services, err := c.List(ctx, serviceWire, client.ListOptions{Namespace: ns})
	if err != nil {
		return nil, err
	}
	instances, err := listInstances(ctx, c, ns)
	if err != nil {
		return nil, err
	}
	rows := map[string]*serviceRow{}
	row := func(ns, name string) *serviceRow {
		k := ns + "/" + name
		if rows[k] == nil {
			rows[k] = &serviceRow{Namespace: ns, Name: name, Protocol: catalog.ProtocolTCP}
		}
		return rows[k]
	}
	for _, r := range services {
		var svc pbcatalog.Service
		if err := cli.DecodeData(r, &svc); err != nil {
			return nil, err
		}
		sr := row(namespaceOr(r.ID.Tenancy.Namespace), r.ID.Name)
		if svc.GetProtocol() != "" {
			sr.Protocol = svc.GetProtocol()
		}
		sr.Mesh = svc.GetMesh()
	}
	for _, in := range instances {
		row(namespaceOr(in.res.ID.Tenancy.Namespace), in.data.GetService())
	}
	out := make([]serviceRow, 0, len(rows))
	for _, k := range sortedKeys(rows) {
		sr := rows[k]
		health, err := healthOf(ctx, c, sr.Namespace, sr.Name)
		if err != nil {
			return nil, err
		}
		for _, e := range health {
			sr.Instances++
			switch healthWord(e, true) {
			case catalog.CheckPassing:
				sr.Passing++
			case catalog.CheckWarning:
				sr.Warning++
			default:
				sr.Critical++
			}
		}
		out = append(out, *sr)
	}
	return out, nil
}

func writeServices(w io.Writer, rows []serviceRow, allNamespaces bool) error {
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, "No services.")
		return err
	}
	tw := cli.NewTable(w)
	head := []string{"SERVICE", "PROTOCOL", "MESH", "INSTANCES", "PASSING", "WARNING", "CRITICAL"}
	if allNamespaces {
		head = append([]string{"NAMESPACE"}, head...)
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, r := range rows {
		if allNamespaces {
			fmt.Fprintf(tw, "%s\t", r.Namespace)
		}
		mesh := "no"
		if r.Mesh {
			mesh = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\n", r.Name, r.Protocol, mesh, r.Instances, r.Passing, r.Warning, r.Critical)
	}
	return tw.Flush()
}
