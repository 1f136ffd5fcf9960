package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/agent"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/client"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/orchestrator"
)

func newInstanceCmd(e *env, cf *clientFlags) *cobra.Command {
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
		newInstanceListCmd(e, cf),
		newInstanceShowCmd(e, cf),
		newInstanceDrainCmd(e, cf, true),
		newInstanceDrainCmd(e, cf, false),
		newInstanceSetAttrCmd(e, cf),
		newInstanceRemoveAttrCmd(e, cf),
	)
	return cmd
}

func newInstanceListCmd(e *env, cf *clientFlags) *cobra.Command {
	var out, cluster string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the instances",
		Example: `  trellis instance list
  trellis instance list --cluster prod -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			list, err := c.List(cmd.Context(), instanceWire, client.ListOptions{})
			if err != nil {
				return serverError(c, err)
			}
			var kept []*wire.Resource
			var data []*pborch.Instance
			for _, r := range list {
				var in pborch.Instance
				if err := decodeData(r, &in); err != nil {
					return err
				}
				if cluster != "" && in.GetCluster() != cluster {
					continue
				}
				kept, data = append(kept, r), append(data, &in)
			}
			if out != cli.FormatTable {
				return writeResources(e.stdout, out, kept, false)
			}
			if len(kept) == 0 {
				fmt.Fprintln(e.stdout, "No instances. Start one with: trellis agent -server ADDR -name NAME")
				return nil
			}
			tw := cli.NewTable(e.stdout)
			fmt.Fprintln(tw, "NAME\tCLUSTER\tSTATUS\tADDRESS\tDRIVERS\tATTRIBUTES\tAGE")
			for i, r := range kept {
				in := data[i]
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID.Name, in.GetCluster(), in.GetStatus(), cli.Dash(in.GetAddress()),
					cli.Dash(availableDrivers(in)), cli.Dash(joinSorted(operatorAttributes(in.GetAttributes()))), cli.Age(r.ID.UID, e.now()))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&cluster, "cluster", "", "only instances of this cluster")
	addOutputFlag(cmd, &out)
	return cmd
}

// operatorAttributes are the attributes the agent does not set itself; the
// list shows only those, which say more.
func operatorAttributes(attrs map[string]string) map[string]string {
	out := make(map[string]string)
	for k, v := range attrs {
		if !agent.BuiltinAttribute(k) {
			out[k] = v
		}
	}
	return out
}

func availableDrivers(in *pborch.Instance) string {
	var names []string
	for _, d := range in.GetDrivers() {
		if d.GetAvailable() {
			names = append(names, d.GetName())
		}
	}
	return strings.Join(names, ",")
}

func newInstanceShowCmd(e *env, cf *clientFlags) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:     "show NAME",
		Short:   "Show one instance: status, attributes, drivers and its tasks",
		Example: `  trellis instance show node-1`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			r, in, err := readInstance(cmd.Context(), c, args[0])
			if err != nil {
				return err
			}
			if out != cli.FormatTable {
				return cli.WriteValue(e.stdout, out, r)
			}
			tw := cli.NewTable(e.stdout)
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
			fmt.Fprintln(e.stdout, "\nDrivers:")
			tw = cli.NewTable(e.stdout)
			for _, d := range in.GetDrivers() {
				fmt.Fprintf(tw, "  %s\t%v\t%s\n", d.GetName(), d.GetAvailable(), d.GetDetail())
			}
			tw.Flush()
			fmt.Fprintln(e.stdout, "\nAttributes:")
			tw = cli.NewTable(e.stdout)
			for _, k := range slices.Sorted(maps.Keys(in.GetAttributes())) {
				fmt.Fprintf(tw, "  %s\t%s\n", k, in.GetAttributes()[k])
			}
			tw.Flush()
			tasks, err := tasksOn(cmd.Context(), c, r.ID.Name)
			if err != nil {
				return err
			}
			fmt.Fprintln(e.stdout, "\nTasks:")
			if len(tasks) == 0 {
				fmt.Fprintln(e.stdout, "  none")
				return nil
			}
			return writeTaskTable(e, tasks, "  ")
		},
	}
	addOutputFlag(cmd, &out)
	return cmd
}

// updateInstance applies edit to an Instance with a compare-and-swap,
// re-reading and retrying when the agent or a server wrote in between.
func updateInstance(ctx context.Context, c *client.Client, name string, edit func(*pborch.Instance) error) (*wire.Resource, error) {
	for attempt := 0; ; attempt++ {
		r, in, err := readInstance(ctx, c, name)
		if err != nil {
			return nil, err
		}
		if err := edit(in); err != nil {
			return nil, err
		}
		data, err := encodeData(in)
		if err != nil {
			return nil, err
		}
		out, err := c.Write(ctx, client.Ref{Type: instanceWire, Name: name}, wire.WriteRequest{Data: data, Metadata: r.Metadata, Version: r.Version})
		if err == nil {
			return out, nil
		}
		if !client.IsCode(err, wire.CodeConflict) || attempt == 9 {
			return nil, serverError(c, err)
		}
	}
}

func newInstanceDrainCmd(e *env, cf *clientFlags, drain bool) *cobra.Command {
	use, short := "drain NAME", "Stop placing new tasks on an instance (running tasks keep running)"
	if !drain {
		use, short = "undrain NAME", "Let new tasks be placed on a drained instance again"
	}
	return &cobra.Command{
		Use:     use,
		Short:   short,
		Example: "  trellis instance " + strings.Fields(use)[0] + " node-1",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			var status string
			_, err = updateInstance(cmd.Context(), c, args[0], func(in *pborch.Instance) error {
				in.Drain = drain
				switch in.GetStatus() {
				case orchestrator.InstanceReady, orchestrator.InstanceDraining:
					in.Status = orchestrator.InstanceStatus(false, false, drain)
				}
				status = in.Status
				return nil
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "instance %s is %s\n", args[0], status)
			return nil
		},
	}
}

func parseAttributeArgs(args []string) (map[string]string, error) {
	attrs := make(map[string]string, len(args))
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			return nil, usageError{fmt.Errorf("%q is not key=value", a)}
		}
		if err := orchestrator.ValidateAttributeKey("attribute", k); err != nil {
			return nil, usageError{err}
		}
		if agent.BuiltinAttribute(k) {
			return nil, usageError{fmt.Errorf("attribute %q is set by the agent itself and cannot be changed", k)}
		}
		attrs[k] = v
	}
	return attrs, nil
}

func newInstanceSetAttrCmd(e *env, cf *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "set-attribute NAME KEY=VALUE...",
		Short: "Set attributes of an instance (schedulers see them at once)",
		Example: `  trellis instance set-attribute node-1 zone=us-east-1a
  trellis instance set-attribute node-1 gpu=true rack=r12`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			attrs, err := parseAttributeArgs(args[1:])
			if err != nil {
				return err
			}
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			_, err = updateInstance(cmd.Context(), c, args[0], func(in *pborch.Instance) error {
				if in.Attributes == nil {
					in.Attributes = map[string]string{}
				}
				for k, v := range attrs {
					in.Attributes[k] = v
				}
				return nil
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "instance %s: set %s\n", args[0], joinSorted(attrs))
			return nil
		},
	}
}

func newInstanceRemoveAttrCmd(e *env, cf *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "remove-attribute NAME KEY...",
		Short:   "Remove attributes from an instance",
		Example: `  trellis instance remove-attribute node-1 rack`,
		Args:    cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, k := range args[1:] {
				if agent.BuiltinAttribute(k) {
					return usageError{fmt.Errorf("attribute %q is set by the agent itself and cannot be removed", k)}
				}
			}
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			var missing []string
			_, err = updateInstance(cmd.Context(), c, args[0], func(in *pborch.Instance) error {
				missing = missing[:0]
				for _, k := range args[1:] {
					if _, ok := in.Attributes[k]; !ok {
						missing = append(missing, k)
					}
					delete(in.Attributes, k)
				}
				if len(missing) == len(args)-1 {
					return errors.New("instance " + args[0] + " has none of those attributes")
				}
				return nil
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "instance %s: removed %s\n", args[0], strings.Join(args[1:], ", "))
			return nil
		},
	}
}
