package command

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/client"
	"trellis.dev/trellis/internal/httpapi/wire"
	schedclient "trellis.dev/trellis/internal/scheduler/client"
)

// EnvironmentTypes are the values of env list --type, a closed set.
var EnvironmentTypes = []string{EnvironmentTypeDaemon}

func newEnvCmd(e *cli.Env) *cobra.Command {
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
	cmd.AddCommand(newEnvCreateCmd(e), newEnvUpdateCmd(e), newEnvGetCmd(e), newEnvListCmd(e),
		newEnvDeleteCmd(e), newEnvDiffCmd(e), newEnvStatusCmd(e), newEnvVersionsCmd(e))
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

` + cli.SpecRulesHelp

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
func (v *envFlagVars) flags(fs *pflag.FlagSet) EnvironmentFlags {
	f := EnvironmentFlags{
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
func readEnvSpec(call *cli.Call, file, name string) (*schedclient.EnvironmentSpec, error) {
	data, source, err := call.ReadInput(file)
	if err != nil {
		return nil, err
	}
	spec, err := ParseEnvironmentSpec(data, source)
	if err != nil {
		return nil, err
	}
	if err := CheckSpecName(spec, name, source); err != nil {
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
	if err := cli.DecodeData(r, &env); err != nil {
		return nil, err
	}
	return &env, nil
}

// environmentWritten says which version a create or update made.
func environmentWritten(verb string, w *schedclient.EnvironmentWrite) (cli.Result, error) {
	envData, err := decodeEnvironment(w.Environment)
	if err != nil {
		return cli.Result{}, err
	}
	name := w.Environment.ID.Name
	if w.Unchanged {
		return cli.Say("environment %s unchanged: still version %d (%s)", name, envData.GetVersionCount(), w.Version).With(w), nil
	}
	return cli.Say("environment %s %s: version %d (%s)\nSee what it would change with: trellis env diff %s; deploy it with: trellis deploy %s",
		name, verb, envData.GetVersionCount(), w.Version, name, name).With(w), nil
}

func newEnvCreateCmd(e *cli.Env) *cobra.Command {
	var v envFlagVars
	var spec *schedclient.EnvironmentSpec
	return e.Command(cli.ClientCommand{
		Use:   "create [NAME] (-f FILE | --taskdef FAMILY:REVISION [flags])",
		Short: "Create an environment and its first version (inactive until deployed)",
		Long:  "Create an environment and its first version. Nothing runs until you deploy it.\n\n" + envSpecHelp,
		Example: `  trellis env create -f log-shipper.yaml
  trellis env create log-shipper --taskdef log-shipper:3 --attribute role=logger --attribute 'zone in (a,b)' \
      --min-healthy-percent 75 --min-healthy-time 10s --auto-rollback`,
		Args:       cobra.MaximumNArgs(1),
		Flags:      v.register,
		Namespaced: true, Output: true,
		Check: func(call *cli.Call) (err error) {
			name := ""
			if len(call.Args) == 1 {
				name = call.Args[0]
			}
			flags := v.flags(call.Flags)
			switch {
			case v.file != "" && flags.Given():
				return cli.Usage(errors.New("-f: give the spec as a file or as flags, not both"))
			case v.file != "":
				spec, err = readEnvSpec(call, v.file, name)
				return err
			case name == "":
				return cli.Usage(errors.New("NAME: required (or -f FILE)"))
			}
			if spec, err = flags.CreateSpec(name); err != nil {
				return cli.Usage(err)
			}
			return nil
		},
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			w, err := schedclient.New(call.Client).CreateEnvironment(ctx, call.Namespace, spec)
			if err != nil {
				return cli.Result{}, err
			}
			return environmentWritten("created", w)
		},
	})
}

func newEnvUpdateCmd(e *cli.Env) *cobra.Command {
	var v envFlagVars
	var flags EnvironmentFlags
	return e.Command(cli.ClientCommand{
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
		Args:       cobra.ExactArgs(1),
		Flags:      v.register,
		Namespaced: true, Output: true,
		Check: func(call *cli.Call) error {
			flags = v.flags(call.Flags)
			if v.file != "" && flags.Given() {
				return cli.Usage(errors.New("-f: give the spec as a file or as flags, not both"))
			}
			if v.file == "" && !flags.Given() {
				return cli.Usage(errors.New("nothing to change: give -f FILE or a flag such as --taskdef"))
			}
			return nil
		},
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			name, c := call.Args[0], schedclient.New(call.Client)
			var spec *schedclient.EnvironmentSpec
			var err error
			if v.file != "" {
				// Read once the client is made, as it always was.
				if spec, err = readEnvSpec(call, v.file, name); err != nil {
					return cli.Result{}, err
				}
			} else {
				info, err := getEnvironment(ctx, c, call.Namespace, name)
				if err != nil {
					return cli.Result{}, err
				}
				current, err := decodeEnvironment(info.Environment)
				if err != nil {
					return cli.Result{}, err
				}
				if spec, err = flags.UpdateSpec(name, current); err != nil {
					return cli.Result{}, cli.Usage(err)
				}
			}
			w, err := c.UpdateEnvironment(ctx, call.Namespace, name, spec)
			if err != nil {
				return cli.Result{}, err
			}
			return environmentWritten("updated", w)
		},
	})
}

// getEnvironment reads an environment, saying how to find one when it is
// not there.
func getEnvironment(ctx context.Context, c *schedclient.Client, namespace, name string) (*schedclient.EnvironmentInfo, error) {
	info, err := c.GetEnvironment(ctx, namespace, name)
	if err != nil {
		return nil, envError(err)
	}
	return info, nil
}

// envError adds a hint to "not found" from an environment's operations.
func envError(err error) error {
	if client.IsCode(err, wire.CodeNotFound) {
		return fmt.Errorf("%w (trellis env list shows the environments)", err)
	}
	return err
}

func newEnvGetCmd(e *cli.Env) *cobra.Command {
	return e.Command(cli.ClientCommand{
		Use:   "get NAME",
		Short: "Show an environment: what runs (its desired version), status, health, the latest version, deployment in progress",
		Example: `  trellis env get log-shipper
  trellis env get log-shipper -o yaml`,
		Args:       cobra.ExactArgs(1),
		Namespaced: true, Output: true,
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			info, err := getEnvironment(ctx, schedclient.New(call.Client), call.Namespace, call.Args[0])
			if err != nil {
				return cli.Result{}, err
			}
			if call.Format != cli.FormatTable {
				return cli.Result{Value: info}, nil
			}
			view, err := environmentView(info)
			if err != nil {
				return cli.Result{}, err
			}
			return cli.Result{Table: func(w io.Writer) error { return WriteEnvironment(w, view) }}, nil
		},
	})
}

// environmentView decodes what env get shows.
func environmentView(info *schedclient.EnvironmentInfo) (EnvironmentView, error) {
	envData, err := decodeEnvironment(info.Environment)
	if err != nil {
		return EnvironmentView{}, err
	}
	envStatus, err := DecodeEnvironmentStatus(info.Environment)
	if err != nil {
		return EnvironmentView{}, err
	}
	view := EnvironmentView{Name: info.Environment.ID.Name, Namespace: info.Environment.ID.Tenancy.Namespace, Env: envData, Status: envStatus, State: info.State}
	if r := info.ActiveDeployment; r != nil {
		var d pbscheduler.Deployment
		if err := cli.DecodeData(r, &d); err != nil {
			return EnvironmentView{}, err
		}
		view.ActiveID, view.Active = r.ID.Name, &d
	}
	if r := info.DesiredVersion; r != nil {
		var v pbscheduler.EnvironmentVersion
		if err := cli.DecodeData(r, &v); err != nil {
			return EnvironmentView{}, err
		}
		view.Desired = &v
	}
	return view, nil
}

func newEnvListCmd(e *cli.Env) *cobra.Command {
	var typ string
	return e.Command(cli.ClientCommand{
		Use:   "list",
		Short: "List environments",
		Example: `  trellis env list
  trellis env list --type daemon -n prod`,
		Args: cobra.NoArgs,
		Flags: func(fs *pflag.FlagSet) {
			fs.Var(cli.NewChoice(&typ, "", "an environment type", EnvironmentTypes...), "type", "only environments of this type: daemon")
		},
		Namespaced: true, Output: true,
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			list, err := schedclient.New(call.Client).ListEnvironments(ctx, call.Namespace, typ)
			if err != nil {
				return cli.Result{}, err
			}
			value := map[string]any{"environments": list}
			if call.Format != cli.FormatTable {
				return cli.Result{Value: value}, nil
			}
			if len(list) == 0 {
				return cli.Say("No environments. Create one with: trellis env create NAME --taskdef FAMILY:REVISION"), nil
			}
			rows := make([]NamedEnvironment, 0, len(list))
			for _, r := range list {
				envData, err := decodeEnvironment(r)
				if err != nil {
					return cli.Result{}, err
				}
				envStatus, err := DecodeEnvironmentStatus(r)
				if err != nil {
					return cli.Result{}, err
				}
				rows = append(rows, NamedEnvironment{Name: r.ID.Name, Env: envData, Status: envStatus})
			}
			return cli.Result{Table: func(w io.Writer) error { return WriteEnvironments(w, rows) }}, nil
		},
	})
}

func newEnvDeleteCmd(e *cli.Env) *cobra.Command {
	return e.Command(cli.ClientCommand{
		Use:   "delete NAME",
		Short: "Delete an environment: its tasks are stopped, then it is removed",
		Long: `Delete an environment. The scheduler stops its tasks and then removes it and
its versions and deployments. Refused while a user deployment is in progress:
stop it first (trellis deployment stop NAME).`,
		Example:    `  trellis env delete log-shipper`,
		Args:       cobra.ExactArgs(1),
		Namespaced: true,
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			if _, err := schedclient.New(call.Client).DeleteEnvironment(ctx, call.Namespace, call.Args[0]); err != nil {
				return cli.Result{}, envError(err)
			}
			return cli.Say("environment %s is being deleted: its tasks are stopping, then it is removed", call.Args[0]), nil
		},
	})
}

func newEnvDiffCmd(e *cli.Env) *cobra.Command {
	var version string
	return e.Command(cli.ClientCommand{
		Use:   "diff NAME [--version V]",
		Short: "Show what deploying a version would change, instance by instance, before anything runs",
		Long: `Show what a deployment of the latest version (or of --version V, a number or a
uuid) would do on every instance: place (no task yet), replace (another task
definition runs), stop (the instance no longer matches) or keep.`,
		Example: `  trellis env diff log-shipper
  trellis env diff log-shipper --version 2`,
		Args: cobra.ExactArgs(1),
		Flags: func(fs *pflag.FlagSet) {
			fs.StringVar(&version, "version", "", "version to compare with what runs: a number or a uuid (default the latest)")
		},
		Namespaced: true, Output: true,
		Check: func(*cli.Call) error { return cli.Usage(ParseVersionArg(version)) },
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			d, err := schedclient.New(call.Client).EnvironmentDiff(ctx, call.Namespace, call.Args[0], version)
			if err != nil {
				return cli.Result{}, envError(err)
			}
			return cli.Result{Value: d, Table: func(w io.Writer) error { return WriteDiff(w, d) }}, nil
		},
	})
}

func newEnvStatusCmd(e *cli.Env) *cobra.Command {
	return e.Command(cli.ClientCommand{
		Use:   "status NAME",
		Short: `Show how many tasks run and how healthy: "5 desired: 2 active, 3 launching, 1 unhealthy"`,
		Long: `Show an environment's tasks: the first line counts them ("5 desired: 2 active,
3 launching, 1 unhealthy"), then the tasks of each version, then each instance
with the version that runs there and its health.`,
		Example: `  trellis env status log-shipper
  trellis env status log-shipper -o json`,
		Args:       cobra.ExactArgs(1),
		Namespaced: true, Output: true,
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			st, err := schedclient.New(call.Client).EnvironmentStatus(ctx, call.Namespace, call.Args[0])
			if err != nil {
				return cli.Result{}, envError(err)
			}
			return cli.Result{Value: st, Table: func(w io.Writer) error { return WriteEnvironmentStatus(w, st) }}, nil
		},
	})
}

func newEnvVersionsCmd(e *cli.Env) *cobra.Command {
	return e.Command(cli.ClientCommand{
		Use:   "versions NAME",
		Short: "List an environment's versions, newest first",
		Example: `  trellis env versions log-shipper
  trellis deploy log-shipper --version 2`,
		Args:       cobra.ExactArgs(1),
		Namespaced: true, Output: true,
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			c, name := schedclient.New(call.Client), call.Args[0]
			list, err := c.ListVersions(ctx, call.Namespace, name)
			if err != nil {
				return cli.Result{}, envError(err)
			}
			if call.Format != cli.FormatTable {
				return cli.Result{Value: map[string]any{"versions": list}}, nil
			}
			info, err := getEnvironment(ctx, c, call.Namespace, name)
			if err != nil {
				return cli.Result{}, err
			}
			envData, err := decodeEnvironment(info.Environment)
			if err != nil {
				return cli.Result{}, err
			}
			envStatus, err := DecodeEnvironmentStatus(info.Environment)
			if err != nil {
				return cli.Result{}, err
			}
			rows := make([]NamedVersion, 0, len(list))
			for _, r := range list {
				var v pbscheduler.EnvironmentVersion
				if err := cli.DecodeData(r, &v); err != nil {
					return cli.Result{}, err
				}
				rows = append(rows, NamedVersion{ID: r.ID.Name, V: &v})
			}
			return cli.Result{Table: func(w io.Writer) error {
				return WriteVersions(w, rows, envData.GetLatestVersion(), envStatus.GetDesiredVersion())
			}}, nil
		},
	})
}
