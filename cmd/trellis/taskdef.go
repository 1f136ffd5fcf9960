package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/client"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/server"
)

func newTaskDefCmd(e *env, cf *clientFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "taskdef",
		Short: "Register, list and show task definitions (family:revision)",
		Long: `A task definition says what a task runs: its containers, their driver (exec or
docker), command or image, env, ports, dependencies, health checks, stop
timeout and limits, and the task's restart policy. Definitions are versioned
as in ECS: registering a family again makes its next revision, family:N, and a
registered revision never changes.`,
		Example: `  trellis taskdef register -f web.yaml
  trellis taskdef list
  trellis taskdef show web:2 -o yaml`,
	}
	cmd.AddCommand(newTaskDefRegisterCmd(e, cf), newTaskDefListCmd(e, cf), newTaskDefShowCmd(e, cf))
	return cmd
}

// specRulesHelp says how every spec file is read and refused.
const specRulesHelp = `YAML is read by YAML 1.2 rules: only true and false are booleans, so on, off,
yes, no, y and n stay the strings they are written as; quote a number meant as
a string. A mistake is refused before anything is sent, naming the file, the
line and the field as the file spells it, with how to fix it:

  web.yaml:6: containers[0].env.PORT: a string is needed: quote it ("8080")
  web.yaml:5: containers[0].command: a list is needed: write ["/bin/sleep", "100"]`

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

The revision is assigned: one more than the family's latest. Registering the
same definition as the latest revision again changes nothing and says so.

` + specRulesHelp

func newTaskDefRegisterCmd(e *env, cf *clientFlags) *cobra.Command {
	var file, namespace, out string
	cmd := &cobra.Command{
		Use:     "register -f FILE",
		Short:   "Register a task definition as its family's next revision",
		Long:    "Register a task definition as its family's next revision.\n\n" + specHelp,
		Example: `  trellis taskdef register -f web.yaml`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return usageError{errors.New("-f: required: the task definition file, or - for standard input")}
			}
			spec, err := readTaskDefSpec(e, file)
			if err != nil {
				return err
			}
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			r, created, err := registerTaskDef(cmd.Context(), c, namespace, spec)
			if err != nil {
				return err
			}
			if out != cli.FormatTable {
				return cli.WriteValue(e.stdout, out, r)
			}
			family, rev, _ := orchestrator.ParseTaskDefinitionName(r.ID.Name)
			if created {
				fmt.Fprintf(e.stdout, "registered %s\n", orchestrator.TaskDefinitionRef(family, rev))
			} else {
				fmt.Fprintf(e.stdout, "%s is already this definition: nothing registered\n", orchestrator.TaskDefinitionRef(family, rev))
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "task definition file (YAML or JSON; - for standard input)")
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", `namespace (default "default")`)
	addOutputFlag(cmd, &out)
	return cmd
}

func readTaskDefSpec(e *env, file string) (*cli.TaskDefinitionSpec, error) {
	data, name, err := readInput(e, file)
	if err != nil {
		return nil, err
	}
	return cli.ParseTaskDefinition(data, name, server.Types())
}

// withRevision is the spec's definition as revision of its family, as the
// API takes it.
func withRevision(spec *cli.TaskDefinitionSpec, revision int64) (json.RawMessage, error) {
	td := proto.CloneOf(spec.Definition)
	td.Revision = revision
	return protojson.MarshalOptions{UseProtoNames: true}.Marshal(td)
}

// familyRevisions lists the stored revisions of a family, latest first.
func familyRevisions(ctx context.Context, c *client.Client, namespace, family string) ([]*wire.Resource, error) {
	list, err := c.List(ctx, taskDefWire, client.ListOptions{Namespace: namespace, Prefix: family + "-", Consistent: true})
	if err != nil {
		return nil, serverError(c, err)
	}
	var out []*wire.Resource
	revs := map[*wire.Resource]int64{}
	for _, r := range list {
		if f, rev, ok := orchestrator.ParseTaskDefinitionName(r.ID.Name); ok && f == family {
			out = append(out, r)
			revs[r] = rev
		}
	}
	slices.SortFunc(out, func(a, b *wire.Resource) int { return int(revs[b] - revs[a]) })
	return out, nil
}

// registerTaskDef stores spec as its family's next revision. A spec equal
// to the latest revision is not stored again. Two registrations racing for
// the same revision cannot both win: a revision is immutable, so the loser
// is refused and tries the next one.
func registerTaskDef(ctx context.Context, c *client.Client, namespace string, spec *cli.TaskDefinitionSpec) (*wire.Resource, bool, error) {
	for attempt := 0; attempt < 5; attempt++ {
		revs, err := familyRevisions(ctx, c, namespace, spec.Family)
		if err != nil {
			return nil, false, err
		}
		next := int64(1)
		if len(revs) > 0 {
			_, latest, _ := orchestrator.ParseTaskDefinitionName(revs[0].ID.Name)
			next = latest + 1
			if sameDefinition(spec, revs[0], latest) {
				return revs[0], false, nil
			}
		}
		data, err := withRevision(spec, next)
		if err != nil {
			return nil, false, err
		}
		ref := client.Ref{Type: taskDefWire, Namespace: namespace, Name: orchestrator.TaskDefinitionName(spec.Family, next)}
		r, err := c.Write(ctx, ref, wire.WriteRequest{Data: data})
		if err == nil {
			return r, true, nil
		}
		if client.IsCode(err, wire.CodeInvalidArgument) && strings.Contains(err.Error(), "immutable") {
			continue // another registration took this revision
		}
		return nil, false, fmt.Errorf("%s: %w", spec.Source, serverError(c, err))
	}
	return nil, false, fmt.Errorf("%s: other registrations of %s kept taking the next revision; try again", spec.Source, spec.Family)
}

// sameDefinition reports whether the spec, with the server's defaults
// applied, is what the stored revision holds.
func sameDefinition(spec *cli.TaskDefinitionSpec, stored *wire.Resource, revision int64) bool {
	want := proto.CloneOf(spec.Definition)
	want.Revision = revision
	data, err := anypb.New(want)
	if err != nil {
		return false
	}
	res := &pbresource.Resource{Data: data}
	if err := orchestrator.MutateTaskDefinition(res); err != nil {
		return false
	}
	var got pborch.TaskDefinition
	if err := decodeData(stored, &got); err != nil {
		return false
	}
	if err := res.GetData().UnmarshalTo(want); err != nil {
		return false
	}
	return proto.Equal(want, &got)
}

func newTaskDefListCmd(e *env, cf *clientFlags) *cobra.Command {
	var namespace, out string
	var all bool
	cmd := &cobra.Command{
		Use:   "list [FAMILY]",
		Short: "List task definitions (of one family, latest first)",
		Example: `  trellis taskdef list
  trellis taskdef list web`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ns, err := namespaceFlag(namespace, all)
			if err != nil {
				return err
			}
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			var list []*wire.Resource
			if len(args) == 1 {
				list, err = familyRevisions(cmd.Context(), c, ns, args[0])
			} else {
				list, err = c.List(cmd.Context(), taskDefWire, client.ListOptions{Namespace: ns})
				err = serverError(c, err)
			}
			if err != nil {
				return err
			}
			if out != cli.FormatTable {
				return writeResources(e.stdout, out, list, false)
			}
			if len(list) == 0 {
				fmt.Fprintln(e.stdout, "No task definitions. Register one with: trellis taskdef register -f FILE")
				return nil
			}
			tw := cli.NewTable(e.stdout)
			fmt.Fprintln(tw, "TASKDEF\tNAMESPACE\tCONTAINERS\tAGE")
			for _, r := range list {
				var td pborch.TaskDefinition
				if err := decodeData(r, &td); err != nil {
					return err
				}
				var cs []string
				for _, ct := range td.GetContainers() {
					cs = append(cs, ct.GetName()+"("+ct.GetDriver()+")")
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", orchestrator.TaskDefinitionRef(td.GetFamily(), td.GetRevision()), r.ID.Tenancy.Namespace,
					strings.Join(cs, ","), cli.Age(r.ID.UID, e.now()))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", `namespace (default "default")`)
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "every namespace")
	addOutputFlag(cmd, &out)
	return cmd
}

// resolveTaskDef reads family:revision, or a family's latest revision.
func resolveTaskDef(ctx context.Context, c *client.Client, namespace, ref string) (*wire.Resource, *pborch.TaskDefinition, error) {
	family, rev, err := orchestrator.ParseTaskDefinitionRef(ref)
	if err != nil {
		return nil, nil, usageError{err}
	}
	var r *wire.Resource
	if rev == 0 {
		revs, err := familyRevisions(ctx, c, namespace, family)
		if err != nil {
			return nil, nil, err
		}
		if len(revs) == 0 {
			return nil, nil, fmt.Errorf("task definition family %q has no revisions (trellis taskdef register -f FILE)", family)
		}
		r = revs[0]
	} else {
		r, err = c.Read(ctx, client.Ref{Type: taskDefWire, Namespace: namespace, Name: orchestrator.TaskDefinitionName(family, rev)}, false)
		if err != nil {
			if client.IsCode(err, wire.CodeNotFound) {
				return nil, nil, fmt.Errorf("task definition %s is not registered (trellis taskdef list %s)", ref, family)
			}
			return nil, nil, serverError(c, err)
		}
	}
	var td pborch.TaskDefinition
	if err := decodeData(r, &td); err != nil {
		return nil, nil, err
	}
	return r, &td, nil
}

func newTaskDefShowCmd(e *env, cf *clientFlags) *cobra.Command {
	var namespace, out string
	cmd := &cobra.Command{
		Use:   "show FAMILY[:REVISION]",
		Short: "Show a task definition (the family's latest when no revision is given)",
		Example: `  trellis taskdef show web
  trellis taskdef show web:2 -o yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			r, td, err := resolveTaskDef(cmd.Context(), c, namespace, args[0])
			if err != nil {
				return err
			}
			if out != cli.FormatTable {
				return cli.WriteValue(e.stdout, out, r)
			}
			fmt.Fprintf(e.stdout, "Task definition %s (namespace %s)\n\n", orchestrator.TaskDefinitionRef(td.GetFamily(), td.GetRevision()), r.ID.Tenancy.Namespace)
			tw := cli.NewTable(e.stdout)
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
			if p := td.GetRestartPolicy(); p != nil {
				s := orchestrator.RestartPolicySettings(p)
				fmt.Fprintf(e.stdout, "\nRestart policy: %d attempts within %s, %s apart\n", s.Attempts, s.Interval, s.Delay)
			} else {
				fmt.Fprintln(e.stdout, "\nRestart policy: none (a container that exits is not restarted)")
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", `namespace (default "default")`)
	addOutputFlag(cmd, &out)
	return cmd
}

func describeCheck(h *pborch.HealthCheck) string {
	switch {
	case h == nil:
		return ""
	case h.GetHttp() != "":
		return "http " + h.GetHttp()
	case h.GetTcp() != "":
		return "tcp " + h.GetTcp()
	default:
		return "command " + strings.Join(h.GetCommand(), " ")
	}
}
