package command

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/agent/session"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/client"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/orchestrator"
)

func newInstanceCmd(e *cli.Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "instance",
		Short: "List, show, drain and label the instances (machines running an agent)",
		Long: `An instance is a machine that runs a Trellis agent. The agent registers it with
its attributes (os, arch, hostname, cpu.count, memory.bytes, kernel, the
drivers it can run, plus any -attribute it was given) and heartbeats; the
servers mark it down when its heartbeats stop.

Status is one of ready, draining (nothing new is placed there), down (no
heartbeat within the TTL; its tasks are LOST) and left (the agent left).`,
		Example: `  trellis instance list
  trellis instance drain node-1
  trellis instance set-attribute node-1 zone=us-east-1a rack=r12`,
	}
	cmd.AddCommand(
		newInstanceListCmd(e),
		newInstanceShowCmd(e),
		newInstanceDrainCmd(e, true),
		newInstanceDrainCmd(e, false),
		newInstanceSetAttrCmd(e),
		newInstanceRemoveAttrCmd(e),
	)
	return cmd
}

func newInstanceListCmd(e *cli.Env) *cobra.Command {
	var cluster string
	return e.Command(cli.ClientCommand{
		Use:   "list",
		Short: "List the instances",
		Example: `  trellis instance list
  trellis instance list --cluster prod -o json`,
		Args: cobra.NoArgs,
		Flags: func(fs *pflag.FlagSet) {
			fs.StringVar(&cluster, "cluster", "", "only instances of this cluster")
		},
		Output: true,
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			list, err := call.Client.List(ctx, instanceWire, client.ListOptions{})
			if err != nil {
				return cli.Result{}, err
			}
			var kept []*wire.Resource
			var data []*pborch.Instance
			for _, r := range list {
				var raw pborch.Instance
				if err := cli.DecodeData(r, &raw); err != nil {
					return cli.Result{}, err
				}
				in, err := instanceView(r, &raw)
				if err != nil {
					return cli.Result{}, err
				}
				if cluster != "" && in.GetCluster() != cluster {
					continue
				}
				kept, data = append(kept, r), append(data, in)
			}
			value := cli.ResourceList(kept, false)
			if len(kept) == 0 {
				return cli.Say("No instances. Start one with: trellis agent -server ADDR -name NAME").With(value), nil
			}
			return cli.Result{Value: value, Table: func(w io.Writer) error {
				tw := cli.NewTable(w)
				fmt.Fprintln(tw, "NAME\tCLUSTER\tSTATUS\tADDRESS\tDRIVERS\tATTRIBUTES\tAGE")
				for i, r := range kept {
					in := data[i]
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID.Name, in.GetCluster(), in.GetStatus(), cli.Dash(in.GetAddress()),
						cli.Dash(availableDrivers(in)), cli.Dash(joinSorted(operatorAttributes(in.GetAttributes()))), cli.Age(r.ID.UID, call.Now()))
				}
				return tw.Flush()
			}}, nil
		},
	})
}

func newInstanceShowCmd(e *cli.Env) *cobra.Command {
	return e.Command(cli.ClientCommand{
		Use:     "show NAME",
		Short:   "Show one instance: status, attributes, drivers and its tasks",
		Example: `  trellis instance show node-1`,
		Args:    cobra.ExactArgs(1),
		Output:  true,
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			r, raw, err := readInstance(ctx, call.Client, call.Args[0])
			if err != nil {
				return cli.Result{}, err
			}
			in, err := instanceView(r, raw)
			if err != nil {
				return cli.Result{}, err
			}
			if call.Format != cli.FormatTable {
				return cli.Result{Value: r}, nil
			}
			// When the tasks cannot be read, the instance is printed
			// all the same, and the command fails after it.
			tasks, err := tasksOn(ctx, call.Client, r.ID.Name)
			return cli.Result{Table: func(w io.Writer) error {
				writeInstance(w, r, in)
				if err != nil {
					return nil // the error follows
				}
				fmt.Fprintln(w, "\nTasks:")
				if len(tasks) == 0 {
					fmt.Fprintln(w, "  none")
					return nil
				}
				return writeTaskTable(w, tasks, "  ", call.Now())
			}}, err
		},
	})
}

// writeInstance prints the instance show prints before its tasks.
func writeInstance(w io.Writer, r *wire.Resource, in *pborch.Instance) {
	tw := cli.NewTable(w)
	fmt.Fprintf(tw, "Name:\t%s\n", r.ID.Name)
	fmt.Fprintf(tw, "Cluster:\t%s\n", in.GetCluster())
	fmt.Fprintf(tw, "Status:\t%s\n", in.GetStatus())
	fmt.Fprintf(tw, "Drain:\t%v\n", in.GetDrain())
	fmt.Fprintf(tw, "Address:\t%s\n", cli.Dash(in.GetAddress()))
	fmt.Fprintf(tw, "Session:\t%s\n", cli.Dash(in.GetSession()))
	if t := in.GetDownSince(); t != nil && in.GetStatus() == orchestrator.InstanceDown {
		fmt.Fprintf(tw, "Down since:\t%s\n", t.AsTime().Local().Format("2006-01-02 15:04:05"))
	}
	fmt.Fprintf(tw, "Resources:\tcpu %d millicores, memory %d MiB\n", in.GetResources().GetCpuMillis(), in.GetResources().GetMemoryBytes()>>20)
	tw.Flush()
	fmt.Fprintln(w, "\nDrivers:")
	tw = cli.NewTable(w)
	for _, d := range in.GetDrivers() {
		fmt.Fprintf(tw, "  %s\t%v\t%s\n", d.GetName(), d.GetAvailable(), d.GetDetail())
	}
	tw.Flush()
	fmt.Fprintln(w, "\nAttributes:")
	tw = cli.NewTable(w)
	for _, k := range slices.Sorted(maps.Keys(in.GetAttributes())) {
		fmt.Fprintf(tw, "  %s\t%s\n", k, in.GetAttributes()[k])
	}
	tw.Flush()
}

func newInstanceDrainCmd(e *cli.Env, drain bool) *cobra.Command {
	use, short := "drain NAME", "Stop placing new tasks on an instance (running tasks keep running)"
	if !drain {
		use, short = "undrain NAME", "Let new tasks be placed on a drained instance again"
	}
	return e.Command(cli.ClientCommand{
		Use:     use,
		Short:   short,
		Example: "  trellis instance " + strings.Fields(use)[0] + " node-1",
		Args:    cobra.ExactArgs(1),
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			var status string
			_, err := updateInstance(ctx, call.Client, call.Args[0], func(in *pborch.Instance) error {
				in.Drain = drain
				switch in.GetStatus() {
				case orchestrator.InstanceReady, orchestrator.InstanceDraining:
					in.Status = orchestrator.InstanceStatus(false, false, drain)
				}
				status = in.Status
				return nil
			})
			if err != nil {
				return cli.Result{}, err
			}
			return cli.Say("instance %s is %s", call.Args[0], status), nil
		},
	})
}

func parseAttributeArgs(args []string) (map[string]string, error) {
	attrs := make(map[string]string, len(args))
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			return nil, cli.Usage(fmt.Errorf("%q is not key=value", a))
		}
		if err := orchestrator.ValidateAttributeKey("attribute", k); err != nil {
			return nil, cli.Usage(err)
		}
		if session.BuiltinAttribute(k) {
			return nil, cli.Usage(fmt.Errorf("attribute %q is set by the agent itself and cannot be changed", k))
		}
		attrs[k] = v
	}
	return attrs, nil
}

func newInstanceSetAttrCmd(e *cli.Env) *cobra.Command {
	var attrs map[string]string
	return e.Command(cli.ClientCommand{
		Use:   "set-attribute NAME KEY=VALUE...",
		Short: "Set attributes of an instance (schedulers see them at once)",
		Example: `  trellis instance set-attribute node-1 zone=us-east-1a
  trellis instance set-attribute node-1 gpu=true rack=r12`,
		Args: cobra.MinimumNArgs(2),
		Check: func(call *cli.Call) (err error) {
			attrs, err = parseAttributeArgs(call.Args[1:])
			return err
		},
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			_, err := updateInstance(ctx, call.Client, call.Args[0], func(in *pborch.Instance) error {
				if in.Attributes == nil {
					in.Attributes = map[string]string{}
				}
				maps.Copy(in.Attributes, attrs)
				return nil
			})
			if err != nil {
				return cli.Result{}, err
			}
			return cli.Say("instance %s: set %s", call.Args[0], joinSorted(attrs)), nil
		},
	})
}

func newInstanceRemoveAttrCmd(e *cli.Env) *cobra.Command {
	return e.Command(cli.ClientCommand{
		Use:     "remove-attribute NAME KEY...",
		Short:   "Remove attributes from an instance",
		Example: `  trellis instance remove-attribute node-1 rack`,
		Args:    cobra.MinimumNArgs(2),
		Check: func(call *cli.Call) error {
			for _, k := range call.Args[1:] {
				if session.BuiltinAttribute(k) {
					return cli.Usage(fmt.Errorf("attribute %q is set by the agent itself and cannot be removed", k))
				}
			}
			return nil
		},
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			name, keys := call.Args[0], call.Args[1:]
			if err := checkOperatorAttributes(ctx, call.Client, name, keys); err != nil {
				return cli.Result{}, err
			}
			var missing []string
			_, err := updateInstance(ctx, call.Client, name, func(in *pborch.Instance) error {
				missing = missing[:0]
				for _, k := range keys {
					if _, ok := in.Attributes[k]; !ok {
						missing = append(missing, k)
					}
					delete(in.Attributes, k)
				}
				if len(missing) == len(keys) {
					return errors.New("instance " + name + " has none of those attributes")
				}
				return nil
			})
			if err != nil {
				return cli.Result{}, err
			}
			return cli.Say("instance %s: removed %s", name, strings.Join(keys, ", ")), nil
		},
	})
}

// checkOperatorAttributes refuses to remove an attribute the instance's
// agent sets (its -attribute flags, in its registration) rather than an
// operator: removing it is a change of the agent's flags.
func checkOperatorAttributes(ctx context.Context, c *client.Client, name string, keys []string) error {
	r, in, err := readInstance(ctx, c, name)
	if err != nil {
		return err
	}
	view, err := instanceView(r, in)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if _, operators := in.GetAttributes()[k]; operators {
			continue
		}
		if _, agents := view.GetAttributes()[k]; agents {
			return fmt.Errorf("attribute %q of instance %s is set by its agent (trellis agent -attribute %s=...), not by an operator: restart the agent without that flag to remove it", k, name, k)
		}
	}
	return nil
}
