package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/client"
	"trellis.dev/trellis/internal/httpapi/wire"
)

func newEnvCmd(e *env, cf *clientFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "env",
		Short: "Create, update, show, compare and delete daemon environments",
		Long: `An environment is one daemon: a task definition the scheduler keeps running,
one copy on every ready instance that matches its instance group (a cluster
and attribute filters). Every create and every update that changes something
makes a new version; nothing runs until a version is deployed (trellis deploy).
See docs/scheduler.md.`,
		Example: `  trellis env create log-shipper --taskdef log-shipper:3 --attribute role=logger
  trellis env diff log-shipper
  trellis deploy log-shipper --wait
  trellis env status log-shipper`,
	}
	cmd.AddCommand(newEnvCreateCmd(e, cf), newEnvUpdateCmd(e, cf), newEnvGetCmd(e, cf), newEnvListCmd(e, cf),
		newEnvDeleteCmd(e, cf), newEnvDiffCmd(e, cf), newEnvStatusCmd(e, cf), newEnvVersionsCmd(e, cf))
	return cmd
}

// envSpecHelp documents the spec file and the flags of env create|update.
const envSpecHelp = `The spec is a file (-f FILE, YAML or JSON, "-" for standard input):

  name: log-shipper
  type: daemon                       # the only type
  task_definition: log-shipper:3     # FAMILY:REVISION, registered with trellis taskdef register
  instance_group:
    cluster: default
    attributes: ["role=logger", "zone in (a,b)"]   # all must hold
  deployment:
    min_healthy_percent: 75          # replace (100-75)% of the instances at a time
    min_healthy_time: 10s            # how long a new task must stay healthy to count
    healthy_deadline: 5m             # a task not healthy by then fails the deployment
    progress_deadline: 10m           # a deployment with no progress this long times out
    auto_rollback: true              # a failed deployment redeploys the last completed version

or flags: --taskdef, --cluster, --attribute (repeat it), --min-healthy-percent,
--min-healthy-time, --healthy-deadline, --progress-deadline, --auto-rollback.

Filters: key=value, key!=value, key (set), !key (not set), key in (a,b),
key notin (a,b). Only ready instances match.

` + specRulesHelp

// envFlagVars are the spec flags of env create and update.
type envFlagVars struct {
	file              string
	taskdef, cluster  string
	attributes        []string
	minHealthyPercent int32
	minHealthyTime    string
	healthyDeadline   string
	progressDeadline  string
	autoRollback      bool
}

func (v *envFlagVars) register(fs *pflag.FlagSet) {
	fs.StringVarP(&v.file, "filename", "f", "", `spec file (YAML or JSON; - for standard input)`)
	fs.StringVar(&v.taskdef, "taskdef", "", "task definition to run, FAMILY:REVISION")
	fs.StringVar(&v.cluster, "cluster", "", `cluster of the instance group (default "default")`)
	fs.StringArrayVar(&v.attributes, "attribute", nil, `attribute filter of the instance group, e.g. 'role=logger' or 'zone in (a,b)' (repeatable; all must hold)`)
	fs.Int32Var(&v.minHealthyPercent, "min-healthy-percent", 0, "percent of matching instances that keep a healthy task during a rollout, 0-100 (default 75)")
	fs.StringVar(&v.minHealthyTime, "min-healthy-time", "", `how long a new task must be healthy to count, e.g. 10s (default 0s)`)
	fs.StringVar(&v.healthyDeadline, "healthy-deadline", "", `a task not healthy this long after placement fails the deployment (default 5m)`)
	fs.StringVar(&v.progressDeadline, "progress-deadline", "", `a deployment that makes no progress this long times out (default 10m)`)
	fs.BoolVar(&v.autoRollback, "auto-rollback", false, "redeploy the last completed version when a deployment fails")
}

// flags are the spec flags that were given.
func (v *envFlagVars) flags(fs *pflag.FlagSet) cli.EnvironmentFlags {
	f := cli.EnvironmentFlags{
		TaskDefinition: v.taskdef, Cluster: v.cluster,
		MinHealthyTime: v.minHealthyTime, HealthyDeadline: v.healthyDeadline, ProgressDeadline: v.progressDeadline,
	}
	if fs.Changed("attribute") {
		f.Attributes = v.attributes
		if f.Attributes == nil {
			f.Attributes = []string{}
		}
	}
	if fs.Changed("min-healthy-percent") {
		p := v.minHealthyPercent
		f.MinHealthyPercent = &p
	}
	if fs.Changed("auto-rollback") {
		b := v.autoRollback
		f.AutoRollback = &b
	}
	return f
}

// readEnvSpec reads -f and reconciles its name with the NAME argument.
func readEnvSpec(e *env, file, name string) (*client.EnvironmentSpec, error) {
	data, source, err := readInput(e, file)
	if err != nil {
		return nil, err
	}
	spec, err := cli.ParseEnvironmentSpec(data, source)
	if err != nil {
		return nil, err
	}
	if err := cli.CheckSpecName(spec, name, source); err != nil {
		return nil, err
	}
	return spec, nil
}

// decodeEnvironment reads an Environment resource's data.
func decodeEnvironment(r *wire.Resource) (*pbscheduler.Environment, error) {
	var env pbscheduler.Environment
	if r == nil {
		return nil, errors.New("the server returned no environment")
	}
	if err := decodeData(r, &env); err != nil {
		return nil, err
	}
	return &env, nil
}

// printEnvironmentWrite says which version a create or update made.
func printEnvironmentWrite(e *env, verb string, w *client.EnvironmentWrite) error {
	envData, err := decodeEnvironment(w.Environment)
	if err != nil {
		return err
	}
	name := w.Environment.ID.Name
	if w.Unchanged {
		fmt.Fprintf(e.stdout, "environment %s unchanged: still version %d (%s)\n", name, envData.GetVersionCount(), w.Version)
		return nil
	}
	fmt.Fprintf(e.stdout, "environment %s %s: version %d (%s)\n", name, verb, envData.GetVersionCount(), w.Version)
	fmt.Fprintf(e.stdout, "See what it would change with: trellis env diff %s; deploy it with: trellis deploy %s\n", name, name)
	return nil
}

func newEnvCreateCmd(e *env, cf *clientFlags) *cobra.Command {
	var v envFlagVars
	var namespace, out string
	cmd := &cobra.Command{
		Use:   "create [NAME] (-f FILE | --taskdef FAMILY:REVISION [flags])",
		Short: "Create an environment and its first version (inactive until deployed)",
		Long:  "Create an environment and its first version. Nothing runs until you deploy it.\n\n" + envSpecHelp,
		Example: `  trellis env create -f log-shipper.yaml
  trellis env create log-shipper --taskdef log-shipper:3 --attribute role=logger --attribute 'zone in (a,b)' \
      --min-healthy-percent 75 --min-healthy-time 10s --auto-rollback`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			flags := v.flags(cmd.Flags())
			var spec *client.EnvironmentSpec
			var err error
			switch {
			case v.file != "" && flags.Given():
				return usageError{errors.New("-f: give the spec as a file or as flags, not both")}
			case v.file != "":
				if spec, err = readEnvSpec(e, v.file, name); err != nil {
					return err
				}
			case name == "":
				return usageError{errors.New("NAME: required (or -f FILE)")}
			default:
				if spec, err = flags.CreateSpec(name); err != nil {
					return usageError{err}
				}
			}
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			w, err := c.CreateEnvironment(cmd.Context(), namespace, spec)
			if err != nil {
				return serverError(c, err)
			}
			if out != cli.FormatTable {
				return cli.WriteValue(e.stdout, out, w)
			}
			return printEnvironmentWrite(e, "created", w)
		},
	}
	v.register(cmd.Flags())
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", `namespace (default "default")`)
	addOutputFlag(cmd, &out)
	return cmd
}

func newEnvUpdateCmd(e *env, cf *clientFlags) *cobra.Command {
	var v envFlagVars
	var namespace, out string
	cmd := &cobra.Command{
		Use:   "update NAME (-f FILE | flags)",
		Short: "Change an environment's spec, making a new version (deploys nothing)",
		Long: `Change an environment's spec. A change makes a new version, which runs once
deployed (trellis deploy NAME); an update that changes nothing says so and
makes none.

With flags, the fields not given keep their values. With -f, the file is sent
as written: it must name the task definition, and the fields it leaves out keep
their values.

` + envSpecHelp,
		Example: `  trellis env update log-shipper --taskdef log-shipper:4
  trellis env update log-shipper --min-healthy-percent 50 --attribute role=logger --attribute 'zone in (a,b,c)'
  trellis env update log-shipper -f log-shipper.yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			flags := v.flags(cmd.Flags())
			if v.file != "" && flags.Given() {
				return usageError{errors.New("-f: give the spec as a file or as flags, not both")}
			}
			if v.file == "" && !flags.Given() {
				return usageError{errors.New("nothing to change: give -f FILE or a flag such as --taskdef")}
			}
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			var spec *client.EnvironmentSpec
			if v.file != "" {
				if spec, err = readEnvSpec(e, v.file, name); err != nil {
					return err
				}
			} else {
				info, err := getEnvironment(ctx, c, namespace, name)
				if err != nil {
					return err
				}
				current, err := decodeEnvironment(info.Environment)
				if err != nil {
					return err
				}
				if spec, err = flags.UpdateSpec(name, current); err != nil {
					return usageError{err}
				}
			}
			w, err := c.UpdateEnvironment(ctx, namespace, name, spec)
			if err != nil {
				return serverError(c, err)
			}
			if out != cli.FormatTable {
				return cli.WriteValue(e.stdout, out, w)
			}
			return printEnvironmentWrite(e, "updated", w)
		},
	}
	v.register(cmd.Flags())
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", `namespace (default "default")`)
	addOutputFlag(cmd, &out)
	return cmd
}

// getEnvironment reads an environment, saying how to find one when it is
// not there.
func getEnvironment(ctx context.Context, c *client.Client, namespace, name string) (*client.EnvironmentInfo, error) {
	info, err := c.GetEnvironment(ctx, namespace, name)
	if err != nil {
		return nil, envError(c, err)
	}
	return info, nil
}

// envError adds a hint to "not found" from an environment's operations.
func envError(c *client.Client, err error) error {
	if client.IsCode(err, wire.CodeNotFound) {
		return fmt.Errorf("%w (trellis env list shows the environments)", err)
	}
	return serverError(c, err)
}

func newEnvGetCmd(e *env, cf *clientFlags) *cobra.Command {
	var namespace, out string
	cmd := &cobra.Command{
		Use:   "get NAME",
		Short: "Show an environment: what runs (its desired version), status, health, the latest version, deployment in progress",
		Example: `  trellis env get log-shipper
  trellis env get log-shipper -o yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			info, err := getEnvironment(cmd.Context(), c, namespace, args[0])
			if err != nil {
				return err
			}
			if out != cli.FormatTable {
				return cli.WriteValue(e.stdout, out, info)
			}
			envData, err := decodeEnvironment(info.Environment)
			if err != nil {
				return err
			}
			view := cli.EnvironmentView{Name: info.Environment.ID.Name, Namespace: info.Environment.ID.Tenancy.Namespace, Env: envData, State: info.State}
			if r := info.ActiveDeployment; r != nil {
				var d pbscheduler.Deployment
				if err := decodeData(r, &d); err != nil {
					return err
				}
				view.ActiveID, view.Active = r.ID.Name, &d
			}
			if r := info.DesiredVersion; r != nil {
				var v pbscheduler.EnvironmentVersion
				if err := decodeData(r, &v); err != nil {
					return err
				}
				view.Desired = &v
			}
			return cli.WriteEnvironment(e.stdout, view)
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", `namespace (default "default")`)
	addOutputFlag(cmd, &out)
	return cmd
}

func newEnvListCmd(e *env, cf *clientFlags) *cobra.Command {
	var namespace, typ, out string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List environments",
		Example: `  trellis env list
  trellis env list --type daemon -n prod`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			list, err := c.ListEnvironments(cmd.Context(), namespace, typ)
			if err != nil {
				return serverError(c, err)
			}
			if out != cli.FormatTable {
				return cli.WriteValue(e.stdout, out, map[string]any{"environments": list})
			}
			if len(list) == 0 {
				fmt.Fprintln(e.stdout, "No environments. Create one with: trellis env create NAME --taskdef FAMILY:REVISION")
				return nil
			}
			rows := make([]cli.NamedEnvironment, 0, len(list))
			for _, r := range list {
				envData, err := decodeEnvironment(r)
				if err != nil {
					return err
				}
				rows = append(rows, cli.NamedEnvironment{Name: r.ID.Name, Env: envData})
			}
			return cli.WriteEnvironments(e.stdout, rows)
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", `namespace (default "default")`)
	cmd.Flags().Var(cli.NewChoice(&typ, "", "an environment type", environmentTypes...), "type", "only environments of this type: daemon")
	addOutputFlag(cmd, &out)
	return cmd
}

func newEnvDeleteCmd(e *env, cf *clientFlags) *cobra.Command {
	var namespace string
	cmd := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete an environment: its tasks are stopped, then it is removed",
		Long: `Delete an environment. The scheduler stops its tasks and then removes it and
its versions and deployments. Refused while a user deployment is in progress:
stop it first (trellis deployment stop NAME).`,
		Example: `  trellis env delete log-shipper`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			if _, err := c.DeleteEnvironment(cmd.Context(), namespace, args[0]); err != nil {
				return envError(c, err)
			}
			fmt.Fprintf(e.stdout, "environment %s is being deleted: its tasks are stopping, then it is removed\n", args[0])
			return nil
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", `namespace (default "default")`)
	return cmd
}

func newEnvDiffCmd(e *env, cf *clientFlags) *cobra.Command {
	var namespace, version, out string
	cmd := &cobra.Command{
		Use:   "diff NAME [--version V]",
		Short: "Show what deploying a version would change, instance by instance, before anything runs",
		Long: `Show what a deployment of the latest version (or of --version V, a number or a
uuid) would do on every instance: place (no task yet), replace (another task
definition runs), stop (the instance no longer matches) or keep.`,
		Example: `  trellis env diff log-shipper
  trellis env diff log-shipper --version 2`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cli.ParseVersionArg(version); err != nil {
				return usageError{err}
			}
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			d, err := c.EnvironmentDiff(cmd.Context(), namespace, args[0], version)
			if err != nil {
				return envError(c, err)
			}
			if out != cli.FormatTable {
				return writeProto(e, out, d)
			}
			return cli.WriteDiff(e.stdout, d)
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", `namespace (default "default")`)
	cmd.Flags().StringVar(&version, "version", "", "version to compare with what runs: a number or a uuid (default the latest)")
	addOutputFlag(cmd, &out)
	return cmd
}

func newEnvStatusCmd(e *env, cf *clientFlags) *cobra.Command {
	var namespace, out string
	cmd := &cobra.Command{
		Use:   "status NAME",
		Short: `Show how many tasks run and how healthy: "5 desired: 2 active, 3 launching, 1 unhealthy"`,
		Long: `Show an environment's tasks: the first line counts them ("5 desired: 2 active,
3 launching, 1 unhealthy"), then the tasks of each version, then each instance
with the version that runs there and its health.`,
		Example: `  trellis env status log-shipper
  trellis env status log-shipper -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			st, err := c.EnvironmentStatus(cmd.Context(), namespace, args[0])
			if err != nil {
				return envError(c, err)
			}
			if out != cli.FormatTable {
				return writeProto(e, out, st)
			}
			return cli.WriteEnvironmentStatus(e.stdout, st)
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", `namespace (default "default")`)
	addOutputFlag(cmd, &out)
	return cmd
}

func newEnvVersionsCmd(e *env, cf *clientFlags) *cobra.Command {
	var namespace, out string
	cmd := &cobra.Command{
		Use:   "versions NAME",
		Short: "List an environment's versions, newest first",
		Example: `  trellis env versions log-shipper
  trellis deploy log-shipper --version 2`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			list, err := c.ListVersions(ctx, namespace, args[0])
			if err != nil {
				return envError(c, err)
			}
			if out != cli.FormatTable {
				return cli.WriteValue(e.stdout, out, map[string]any{"versions": list})
			}
			info, err := getEnvironment(ctx, c, namespace, args[0])
			if err != nil {
				return err
			}
			envData, err := decodeEnvironment(info.Environment)
			if err != nil {
				return err
			}
			rows := make([]cli.NamedVersion, 0, len(list))
			for _, r := range list {
				var v pbscheduler.EnvironmentVersion
				if err := decodeData(r, &v); err != nil {
					return err
				}
				rows = append(rows, cli.NamedVersion{ID: r.ID.Name, V: &v})
			}
			return cli.WriteVersions(e.stdout, rows, envData.GetLatestVersion(), envData.GetDesiredVersion())
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", `namespace (default "default")`)
	addOutputFlag(cmd, &out)
	return cmd
}
