package command

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/client"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
)

func newTaskDefCmd(e *cli.Env, types *resource.Registry) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "taskdef",
		Short: "Register, list and show task definitions (family:revision)",
		Long: `A task definition says what a task runs: its containers, their driver (exec or
docker), command or image, env, ports, dependencies, health checks, stop
timeout and limits, the task's restart policy, and its mesh block (the
service its tasks are instances of, and their upstreams). Definitions are versioned
as in ECS: registering a family again makes its next revision, family:N, and a
registered revision never changes.`,
		Example: `  trellis taskdef register -f web.yaml
  trellis taskdef list
  trellis taskdef show web:2 -o yaml`,
	}
	cmd.AddCommand(newTaskDefRegisterCmd(e, types), newTaskDefListCmd(e), newTaskDefShowCmd(e))
	return cmd
}

// specHelp documents the file `taskdef register` reads.
const specHelp = `FILE is YAML or JSON ("-" reads standard input):

  family: web
  containers:
    - name: app
      driver: exec                 # or docker, with image: name:tag (already on the host)
      command: ["/usr/local/bin/web", "--port", "8080"]
      env: {LOG_LEVEL: info}
      working_dir: /srv/web        # optional
      ports: [8080]
      essential: true              # default true; the task stops when it exits for good
      depends_on: [{container: proxy, condition: HEALTHY}]   # START, HEALTHY, COMPLETE, SUCCESS
      health_check: {http: "http://127.0.0.1:8080/healthz", interval: 5s, timeout: 2s, retries: 3, start_period: 10s}
                                   # or command: [...] (run in the container), or tcp: host:port
      stop_timeout: 30s            # SIGTERM, then SIGKILL after this long
      resources: {cpu_millis: 500, memory_bytes: 268435456}
    - name: proxy
      driver: exec
      command: ["/bin/sh", "-c", "exec sleep infinity"]
      sidecar: true                # on stop, runs until the other containers have exited
  restart_policy: {attempts: 3, interval: 5m, delay: 5s}
  mesh:                            # optional: the task is an instance of a mesh service
    service: web                   # default: the family
    port: 8080                     # the app's port inside the task
    protocol: http                 # tcp (the default), http or grpc
    upstreams:
      - {service: api, local_port: 9191}   # the app reaches api on 127.0.0.1:9191
    transparent: false             # true: all outbound TCP through the proxy (network: bridge only)
    tags: [v1]
    meta: {team: payments}

With a mesh block, each task registers its service instance in the catalog
before its containers start, and removes it once stopped (docs/catalog.md);
a bridge task also gets the sidecar proxy, the container trellis-proxy, started
and healthy before the others (docs/mesh.md).

The revision is assigned: one more than the family's latest. Registering the
same definition as the latest revision again changes nothing and says so.

` + cli.SpecRulesHelp

func newTaskDefRegisterCmd(e *cli.Env, types *resource.Registry) *cobra.Command {
	var file string
	var spec *TaskDefinitionSpec
	return e.Command(cli.ClientCommand{
		Use:     "register -f FILE",
		Short:   "Register a task definition as its family's next revision",
		Long:    "Register a task definition as its family's next revision.\n\n" + specHelp,
		Example: `  trellis taskdef register -f web.yaml`,
		Args:    cobra.NoArgs,
		Flags: func(fs *pflag.FlagSet) {
			fs.StringVarP(&file, "filename", "f", "", "task definition file (YAML or JSON; - for standard input)")
		},
		Namespaced: true, Output: true,
		Check: func(call *cli.Call) error {
			if file == "" {
				return cli.Usage(errors.New("-f: required: the task definition file, or - for standard input"))
			}
			data, name, err := call.ReadInput(file)
			if err != nil {
				return err
			}
			spec, err = ParseTaskDefinition(data, name, types)
			return err
		},
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			r, created, err := registerTaskDef(ctx, call.Client, call.Namespace, spec)
			if err != nil {
				return cli.Result{}, err
			}
			family, rev, _ := orchestrator.ParseTaskDefinitionName(r.ID.Name)
			if created {
				return cli.Say("registered %s", orchestrator.TaskDefinitionRef(family, rev)).With(r), nil
			}
			return cli.Say("%s is already this definition: nothing registered", orchestrator.TaskDefinitionRef(family, rev)).With(r), nil
		},
	})
}

func newTaskDefListCmd(e *cli.Env) *cobra.Command {
	return e.Command(cli.ClientCommand{
		Use:   "list [FAMILY]",
		Short: "List task definitions (of one family, latest first)",
		Example: `  trellis taskdef list
  trellis taskdef list web`,
		Args:          cobra.MaximumNArgs(1),
		AllNamespaces: true, Output: true,
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			var list []*wire.Resource
			var err error
			if len(call.Args) == 1 {
				list, err = familyRevisions(ctx, call.Client, call.Namespace, call.Args[0])
			} else {
				list, err = call.Client.List(ctx, taskDefWire, client.ListOptions{Namespace: call.Namespace})
			}
			if err != nil {
				return cli.Result{}, err
			}
			value := cli.ResourceList(list, false)
			if len(list) == 0 {
				return cli.Say("No task definitions. Register one with: trellis taskdef register -f FILE").With(value), nil
			}
			return cli.Result{Value: value, Table: func(w io.Writer) error {
				tw := cli.NewTable(w)
				fmt.Fprintln(tw, "TASKDEF\tNAMESPACE\tCONTAINERS\tAGE")
				for _, r := range list {
					var td pborch.TaskDefinition
					if err := cli.DecodeData(r, &td); err != nil {
						return err
					}
					var cs []string
					for _, ct := range td.GetContainers() {
						cs = append(cs, ct.GetName()+"("+ct.GetDriver()+")")
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", orchestrator.TaskDefinitionRef(td.GetFamily(), td.GetRevision()), r.ID.Tenancy.Namespace,
						strings.Join(cs, ","), cli.Age(r.ID.UID, call.Now()))
				}
				return tw.Flush()
			}}, nil
		},
	})
}

func newTaskDefShowCmd(e *cli.Env) *cobra.Command {
	return e.Command(cli.ClientCommand{
		Use:   "show FAMILY[:REVISION]",
		Short: "Show a task definition (the family's latest when no revision is given)",
		Example: `  trellis taskdef show web
  trellis taskdef show web:2 -o yaml`,
		Args:       cobra.ExactArgs(1),
		Namespaced: true, Output: true,
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			r, td, err := resolveTaskDef(ctx, call.Client, call.Namespace, call.Args[0])
			if err != nil {
				return cli.Result{}, err
			}
			return cli.Result{Value: r, Table: func(w io.Writer) error { return writeTaskDefinition(w, r, td) }}, nil
		},
	})
}

// writeTaskDefinition is the table of taskdef show.
func writeTaskDefinition(w io.Writer, r *wire.Resource, td *pborch.TaskDefinition) error {
	fmt.Fprintf(w, "Task definition %s (namespace %s)\n\n", orchestrator.TaskDefinitionRef(td.GetFamily(), td.GetRevision()), r.ID.Tenancy.Namespace)
	tw := cli.NewTable(w)
	fmt.Fprintln(tw, "CONTAINER\tDRIVER\tRUNS\tPORTS\tESSENTIAL\tSIDECAR\tDEPENDS ON\tHEALTH CHECK")
	for _, ct := range td.GetContainers() {
		runs := ct.GetImage()
		if len(ct.GetCommand()) > 0 {
			runs = strings.TrimSpace(runs + " " + strings.Join(ct.GetCommand(), " "))
		}
		var ports, deps []string
		for _, p := range ct.GetPorts() {
			ports = append(ports, fmt.Sprint(p))
		}
		for _, d := range ct.GetDependsOn() {
			deps = append(deps, d.GetContainer()+":"+d.GetCondition())
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\t%v\t%s\t%s\n", ct.GetName(), ct.GetDriver(), runs, cli.Dash(strings.Join(ports, ",")),
			ct.GetEssential(), ct.GetSidecar(), cli.Dash(strings.Join(deps, ",")), cli.Dash(describeCheck(ct.GetHealthCheck())))
	}
	tw.Flush()
	writeTaskDefinitionNetwork(w, td)
	writeTaskDefinitionMesh(w, td)
	if p := td.GetRestartPolicy(); p != nil {
		s := orchestrator.RestartPolicySettings(p)
		fmt.Fprintf(w, "\nRestart policy: %d attempts within %s, %s apart\n", s.Attempts, s.Interval, s.Delay)
	} else {
		fmt.Fprintln(w, "\nRestart policy: none (a container that exits is not restarted)")
	}
	return nil
}
