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
	"trellis.dev/trellis/internal/httpapi/wire"
)

// serviceView is a service as show prints it.
type serviceView struct {
	Namespace string         `json:"namespace"`
	Name      string         `json:"name"`
	Protocol  string         `json:"protocol"`
	Mesh      bool           `json:"mesh"`
	Defined   bool           `json:"defined"` // a catalog/v1/Service exists
	Instances []instanceView `json:"instances"`
}

type instanceView struct {
	Name     string                `json:"name"`
	Address  string                `json:"address"`
	Port     uint32                `json:"port"`
	Instance string                `json:"instance,omitempty"`
	Task     string                `json:"task,omitempty"`
	Tags     []string              `json:"tags,omitempty"`
	Health   string                `json:"health"`
	Checks   []catalog.ConsulCheck `json:"checks"`
}

func newShowCmd(e *cli.Env) *cobra.Command {
	return e.Command(cli.ClientCommand{
		Use:   "show NAME",
		Short: "Show a service: its instances, where each runs, their health and checks",
		Long: `Show the service NAME of the namespace (-n, "default" by default): its protocol,
and each of its instances with its address, where it runs (a task on an
instance, or outside Trellis), its health (its worst check) and each check's
status and last output.

-o json and -o yaml print the same view.`,
		Example: `  trellis service show api
  trellis service show db -n payments -o yaml`,
		Args:       cobra.ExactArgs(1),
		Namespaced: true, Output: true,
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			v, err := showService(ctx, call.Client, namespaceOr(call.Namespace), call.Args[0])
			if err != nil {
				return cli.Result{}, err
			}
			return cli.Result{Value: v, Table: func(w io.Writer) error { return writeService(w, v) }}, nil
		},
	})
}

func showService(ctx context.Context, c *client.Client, ns, name string) (*serviceView, error) {
	v := &serviceView{Namespace: ns, Name: name, Protocol: catalog.ProtocolTCP, Instances: []instanceView{}}
	r, err := c.Read(ctx, client.Ref{Type: serviceWire, Namespace: ns, Name: name}, false)
	switch {
	case client.IsCode(err, wire.CodeNotFound):
	case err != nil:
		return nil, err
	default:
		var svc pbcatalog.Service
		if err := cli.DecodeData(r, &svc); err != nil {
			return nil, err
		}
		v.Defined, v.Mesh = true, svc.GetMesh()
		if svc.GetProtocol() != "" {
			v.Protocol = svc.GetProtocol()
		}
	}
	instances, err := listInstances(ctx, c, ns)
	if err != nil {
		return nil, err
	}
	health, err := healthOf(ctx, c, ns, name)
	if err != nil {
		return nil, err
	}
	for _, in := range instances {
		if in.data.GetService() != name {
			continue
		}
		e, ok := health[in.res.ID.Name]
		checks := e.Checks
		if checks == nil {
			checks = []catalog.ConsulCheck{}
		}
		v.Instances = append(v.Instances, instanceView{
			Name: in.res.ID.Name, Address: in.data.GetAddress(), Port: in.data.GetPort(),
			Instance: in.data.GetInstance(), Task: in.data.GetTask(), Tags: in.data.GetTags(),
			Health: healthWord(e, ok), Checks: checks,
		})
	}
	if !v.Defined && len(v.Instances) == 0 {
		return nil, fmt.Errorf("service %s/%s: no such service: no catalog/v1/Service and no instance names it (trellis service list -n %s lists the services)", ns, name, ns)
	}
	return v, nil
}

func writeService(w io.Writer, v *serviceView) error {
	fmt.Fprintf(w, "Service:    %s/%s\n", v.Namespace, v.Name)
	fmt.Fprintf(w, "Protocol:   %s\n", v.Protocol)
	fmt.Fprintf(w, "Mesh:       %t\n", v.Mesh)
	if len(v.Instances) == 0 {
		_, err := fmt.Fprintln(w, "Instances:  none")
		return err
	}
	fmt.Fprintln(w, "Instances:")
	tw := cli.NewTable(w)
	fmt.Fprintln(tw, "  INSTANCE\tADDRESS\tRUNS ON\tHEALTH\tTAGS")
	for _, in := range v.Instances {
		fmt.Fprintf(tw, "  %s\t%s:%d\t%s\t%s\t%s\n", in.Name, in.Address, in.Port,
			runsOn(&pbcatalog.ServiceInstance{Instance: in.Instance, Task: in.Task}), in.Health, cli.Dash(strings.Join(in.Tags, ",")))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "Checks:")
	tw = cli.NewTable(w)
	fmt.Fprintln(tw, "  INSTANCE\tCHECK\tTYPE\tSTATUS\tOUTPUT")
	for _, in := range v.Instances {
		for _, c := range in.Checks {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", in.Name, c.Name, c.Type, c.Status, cli.Dash(oneLine(c.Output)))
		}
	}
	return tw.Flush()
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}
