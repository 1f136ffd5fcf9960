package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/oklog/ulid/v2"
	"github.com/spf13/cobra"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/agent"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/client"
	"trellis.dev/trellis/internal/driver"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/orchestrator"
)

func newTaskCmd(e *env, cf *clientFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "task",
		Short: "Run, list, show, stop and read the logs of tasks",
		Long: `A task is one run of a task definition on one instance. Its desired status is
RUNNING or STOPPED; its last status, which the instance's agent reports, goes
PENDING -> RUNNING -> STOPPED, or LOST when its instance stops heartbeating.

Its health is the one the scheduler judges by, and every view shows: healthy
when its health checks pass, or, for a task without checks, once it runs;
unhealthy when a check fails; unknown while its checks have not passed yet
or its instance stopped reporting (LOST); "-" when it does not run.`,
		Example: `  trellis task run --taskdef web:1 --instance node-1
  trellis task list
  trellis task logs 01jd3k... app -f
  trellis task stop 01jd3k...`,
	}
	cmd.AddCommand(newTaskRunCmd(e, cf), newTaskListCmd(e, cf), newTaskShowCmd(e, cf), newTaskStopCmd(e, cf), newTaskLogsCmd(e, cf))
	return cmd
}

// newTaskName is a fresh task name: a lowercase ULID, so names sort by
// creation time.
func newTaskName() (string, error) {
	id, err := ulid.New(ulid.Now(), rand.Reader)
	if err != nil {
		return "", err
	}
	return strings.ToLower(id.String()), nil
}

func newTaskRunCmd(e *env, cf *clientFlags) *cobra.Command {
	var taskdef, instance, namespace, startedBy, out string
	cmd := &cobra.Command{
		Use:   "run --taskdef FAMILY[:REVISION] --instance NAME",
		Short: "Place one task on an instance (a one-off placement, before any scheduler)",
		Long: `Place one task of a task definition on a named instance. The instance's agent
sees it at once and starts its containers; trellis task show follows it.

Without a revision the family's latest is used. An instance that is draining,
down or gone is refused.`,
		Example: `  trellis task run --taskdef web:1 --instance node-1
  trellis task run --taskdef web --instance node-2 --started-by release-42`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if taskdef == "" || instance == "" {
				return usageError{errors.New("--taskdef and --instance are required")}
			}
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			_, td, err := resolveTaskDef(ctx, c, namespace, taskdef)
			if err != nil {
				return err
			}
			_, in, err := readInstance(ctx, c, instance)
			if err != nil {
				return err
			}
			if in.GetStatus() != orchestrator.InstanceReady {
				return fmt.Errorf("instance %s is %s: tasks are placed only on ready instances", instance, in.GetStatus())
			}
			for _, ct := range td.GetContainers() {
				if !driverAvailable(in, ct.GetDriver()) {
					return fmt.Errorf("instance %s cannot run container %s: driver %s is not available there", instance, ct.GetName(), ct.GetDriver())
				}
			}
			name, err := newTaskName()
			if err != nil {
				return err
			}
			if startedBy == "" {
				startedBy = "trellis task run"
			}
			data, err := encodeData(&pborch.Task{
				TaskDefinition: orchestrator.TaskDefinitionRef(td.GetFamily(), td.GetRevision()),
				Instance:       instance,
				StartedBy:      startedBy,
				DesiredStatus:  orchestrator.StatusRunning,
				LastStatus:     orchestrator.StatusPending,
			})
			if err != nil {
				return err
			}
			r, err := c.Write(ctx, client.Ref{Type: taskWire, Namespace: namespace, Name: name}, wire.WriteRequest{Data: data})
			if err != nil {
				return serverError(c, err)
			}
			if out != cli.FormatTable {
				return cli.WriteValue(e.stdout, out, r)
			}
			fmt.Fprintf(e.stdout, "task %s of %s placed on %s\n", name, orchestrator.TaskDefinitionRef(td.GetFamily(), td.GetRevision()), instance)
			return nil
		},
	}
	cmd.Flags().StringVar(&taskdef, "taskdef", "", "task definition, FAMILY:REVISION (or FAMILY for the latest)")
	cmd.Flags().StringVar(&instance, "instance", "", "instance to run it on")
	cmd.Flags().StringVar(&startedBy, "started-by", "", `who started it (recorded as started_by; default "trellis task run")`)
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", `namespace (default "default")`)
	addOutputFlag(cmd, &out)
	return cmd
}

func driverAvailable(in *pborch.Instance, name string) bool {
	for _, d := range in.GetDrivers() {
		if d.GetName() == name {
			return d.GetAvailable()
		}
	}
	return len(in.GetDrivers()) == 0 // an agent that reports no drivers is not second-guessed
}

// taskRow is a task with its decoded data.
type taskRow struct {
	r    *wire.Resource
	task *pborch.Task
}

func decodeTasks(list []*wire.Resource) ([]taskRow, error) {
	rows := make([]taskRow, 0, len(list))
	for _, r := range list {
		var t pborch.Task
		if err := decodeData(r, &t); err != nil {
			return nil, err
		}
		rows = append(rows, taskRow{r, &t})
	}
	return rows, nil
}

// tasksOn lists the tasks placed on an instance, in every namespace.
func tasksOn(ctx context.Context, c *client.Client, instance string) ([]taskRow, error) {
	list, err := c.List(ctx, taskWire, client.ListOptions{Namespace: "*"})
	if err != nil {
		return nil, serverError(c, err)
	}
	rows, err := decodeTasks(list)
	if err != nil {
		return nil, err
	}
	kept := rows[:0]
	for _, row := range rows {
		if row.task.GetInstance() == instance {
			kept = append(kept, row)
		}
	}
	return kept, nil
}

func writeTaskTable(e *env, rows []taskRow, indent string) error {
	tw := cli.NewTable(e.stdout)
	fmt.Fprintln(tw, indent+"TASK\tNAMESPACE\tTASKDEF\tINSTANCE\tDESIRED\tLAST\tHEALTH\tAGE")
	for _, row := range rows {
		t := row.task
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", indent, row.r.ID.Name, row.r.ID.Tenancy.Namespace, t.GetTaskDefinition(), t.GetInstance(),
			t.GetDesiredStatus(), t.GetLastStatus(), cli.TaskHealth(t), cli.Age(row.r.ID.UID, e.now()))
	}
	return tw.Flush()
}

func newTaskListCmd(e *env, cf *clientFlags) *cobra.Command {
	var namespace, instance, status, out string
	var all bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List tasks",
		Example: `  trellis task list
  trellis task list -A --instance node-1 --status RUNNING`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ns, err := namespaceFlag(namespace, all)
			if err != nil {
				return err
			}
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			list, err := c.List(cmd.Context(), taskWire, client.ListOptions{Namespace: ns})
			if err != nil {
				return serverError(c, err)
			}
			rows, err := decodeTasks(list)
			if err != nil {
				return err
			}
			kept := rows[:0]
			var keptRes []*wire.Resource
			for _, row := range rows {
				if instance != "" && row.task.GetInstance() != instance {
					continue
				}
				if status != "" && !strings.EqualFold(row.task.GetLastStatus(), status) {
					continue
				}
				kept = append(kept, row)
				keptRes = append(keptRes, row.r)
			}
			if out != cli.FormatTable {
				return writeResources(e.stdout, out, keptRes, false)
			}
			if len(kept) == 0 {
				fmt.Fprintln(e.stdout, "No tasks.")
				return nil
			}
			return writeTaskTable(e, kept, "")
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", `namespace (default "default")`)
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "every namespace")
	cmd.Flags().StringVar(&instance, "instance", "", "only tasks on this instance")
	cmd.Flags().Var(cli.NewChoice(&status, "", "a task status", taskStatuses...), "status", "only tasks whose last status is this: PENDING, RUNNING, STOPPED or LOST")
	addOutputFlag(cmd, &out)
	return cmd
}

func readTask(ctx context.Context, c *client.Client, namespace, name string) (*wire.Resource, *pborch.Task, error) {
	r, err := c.Read(ctx, client.Ref{Type: taskWire, Namespace: namespace, Name: name}, false)
	if err != nil {
		if client.IsCode(err, wire.CodeNotFound) {
			return nil, nil, fmt.Errorf("task %q not found (trellis task list -A shows the tasks)", name)
		}
		return nil, nil, serverError(c, err)
	}
	var t pborch.Task
	if err := decodeData(r, &t); err != nil {
		return nil, nil, err
	}
	return r, &t, nil
}

func newTaskShowCmd(e *env, cf *clientFlags) *cobra.Command {
	var namespace, out string
	cmd := &cobra.Command{
		Use:   "show TASK",
		Short: "Show a task and the state of each of its containers",
		Example: `  trellis task show 01jd3kq8w6r3x0t5v2m4n7p9yb
  trellis task show 01jd3kq8w6r3x0t5v2m4n7p9yb -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			r, t, err := readTask(cmd.Context(), c, namespace, args[0])
			if err != nil {
				return err
			}
			if out != cli.FormatTable {
				return cli.WriteValue(e.stdout, out, r)
			}
			tw := cli.NewTable(e.stdout)
			fmt.Fprintf(tw, "Task:\t%s\n", r.ID.Name)
			fmt.Fprintf(tw, "Namespace:\t%s\n", r.ID.Tenancy.Namespace)
			fmt.Fprintf(tw, "Task definition:\t%s\n", t.GetTaskDefinition())
			fmt.Fprintf(tw, "Instance:\t%s\n", t.GetInstance())
			fmt.Fprintf(tw, "Started by:\t%s\n", cli.Dash(t.GetStartedBy()))
			if t.GetEnvironment() != "" {
				fmt.Fprintf(tw, "Environment:\t%s, version %s, deployment %s\n", t.GetEnvironment(),
					environmentVersionName(cmd.Context(), c, r.ID.Tenancy.Namespace, t.GetEnvironmentVersion()), cli.Dash(t.GetDeployment()))
			}
			if t.GetReplaces() != "" {
				fmt.Fprintf(tw, "Replaces:\t%s\n", t.GetReplaces())
			}
			fmt.Fprintf(tw, "Desired status:\t%s\n", t.GetDesiredStatus())
			fmt.Fprintf(tw, "Last status:\t%s\n", t.GetLastStatus())
			fmt.Fprintf(tw, "Health:\t%s\n", cli.TaskHealthDetail(t))
			if t.GetStopReason() != "" {
				fmt.Fprintf(tw, "Stop reason:\t%s\n", t.GetStopReason())
			}
			if s := t.GetStartedAt(); s != nil {
				fmt.Fprintf(tw, "Started at:\t%s\n", s.AsTime().Local().Format("2006-01-02 15:04:05.000"))
			}
			if s := t.GetStoppedAt(); s != nil {
				fmt.Fprintf(tw, "Stopped at:\t%s\n", s.AsTime().Local().Format("2006-01-02 15:04:05.000"))
			}
			tw.Flush()
			fmt.Fprintln(e.stdout)
			if len(t.GetContainers()) == 0 {
				fmt.Fprintln(e.stdout, "No container has been reported yet.")
				return nil
			}
			tw = cli.NewTable(e.stdout)
			fmt.Fprintln(tw, "CONTAINER\tSTATUS\tHEALTH\tEXIT\tRESTARTS\tRUNTIME ID\tREASON")
			for _, cs := range t.GetContainers() {
				exit := "-"
				switch {
				case cs.ExitCode == nil:
				case cs.GetExitCode() < 0:
					// A process re-adopted after an agent restart is seen
					// to end, but not its status.
					exit = "unknown"
				default:
					exit = fmt.Sprint(cs.GetExitCode())
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", cs.GetName(), cs.GetStatus(), cli.CheckHealth(cs.GetHealth()), exit, cs.GetRestarts(),
					cli.Dash(shortID(cs.GetRuntimeId())), cli.Dash(cs.GetReason()))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", `namespace (default "default")`)
	addOutputFlag(cmd, &out)
	return cmd
}

// environmentVersionName names a task's environment version by its
// number, as every other view does; the uuid the task records is kept when
// the version cannot be read (it was deleted with its environment).
func environmentVersionName(ctx context.Context, c *client.Client, namespace, uuid string) string {
	if uuid == "" {
		return "-"
	}
	r, err := c.Read(ctx, client.Ref{Type: environmentVersionWire, Namespace: namespace, Name: uuid}, false)
	if err != nil {
		return uuid
	}
	var v pbscheduler.EnvironmentVersion
	if err := decodeData(r, &v); err != nil || v.GetNumber() == 0 {
		return uuid
	}
	return fmt.Sprint(v.GetNumber())
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func newTaskStopCmd(e *env, cf *clientFlags) *cobra.Command {
	var namespace, reason string
	cmd := &cobra.Command{
		Use:     "stop TASK",
		Short:   "Stop a task: its agent sends SIGTERM, then SIGKILL after each container's stop timeout",
		Example: `  trellis task stop 01jd3kq8w6r3x0t5v2m4n7p9yb --reason "replaced by web:3"`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			for attempt := 0; ; attempt++ {
				r, t, err := readTask(ctx, c, namespace, args[0])
				if err != nil {
					return err
				}
				if t.GetDesiredStatus() == orchestrator.StatusStopped {
					fmt.Fprintf(e.stdout, "task %s is already stopping (last status %s)\n", args[0], t.GetLastStatus())
					return nil
				}
				t.DesiredStatus = orchestrator.StatusStopped
				if t.GetStopReason() == "" {
					t.StopReason = "stopped by user"
					if reason != "" {
						t.StopReason += ": " + reason
					}
				}
				data, err := encodeData(t)
				if err != nil {
					return err
				}
				_, err = c.Write(ctx, client.Ref{Type: taskWire, Namespace: namespace, Name: args[0]}, wire.WriteRequest{Data: data, Metadata: r.Metadata, Version: r.Version})
				if err == nil {
					fmt.Fprintf(e.stdout, "task %s is stopping\n", args[0])
					return nil
				}
				if !client.IsCode(err, wire.CodeConflict) || attempt == 9 {
					return serverError(c, err)
				}
			}
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", `namespace (default "default")`)
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the task's stop reason")
	return cmd
}

func newTaskLogsCmd(e *env, cf *clientFlags) *cobra.Command {
	var namespace string
	var follow, stderr bool
	cmd := &cobra.Command{
		Use:   "logs TASK [CONTAINER]",
		Short: "Print a container's output (the task's only or first container by default)",
		Long: `Print what a container of the task wrote to stdout (or, with --stderr, to
stderr). The logs are read from the agent of the task's instance, at the
address the instance registered; -f follows them until Ctrl-C.`,
		Example: `  trellis task logs 01jd3k...
  trellis task logs 01jd3k... app -f --stderr`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			r, t, err := readTask(ctx, c, namespace, args[0])
			if err != nil {
				return err
			}
			container := ""
			if len(args) == 2 {
				container = args[1]
			} else {
				_, td, err := resolveTaskDef(ctx, c, r.ID.Tenancy.Namespace, t.GetTaskDefinition())
				if err != nil {
					return err
				}
				container = td.GetContainers()[0].GetName()
			}
			_, in, err := readInstance(ctx, c, t.GetInstance())
			if err != nil {
				return err
			}
			if in.GetAddress() == "" {
				return fmt.Errorf("instance %s has registered no address to read logs from", t.GetInstance())
			}
			stream := driver.Stdout
			if stderr {
				stream = driver.Stderr
			}
			logs, err := agent.OpenLogs(ctx, in.GetAddress(), r.ID.Tenancy.Namespace, r.ID.Name, container, stream, follow)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("agent of instance %s at %s: %w", t.GetInstance(), in.GetAddress(), err)
			}
			defer logs.Close()
			if _, err := io.Copy(e.stdout, logs); err != nil && ctx.Err() == nil {
				return err
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", `namespace (default "default")`)
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new output until Ctrl-C")
	cmd.Flags().BoolVar(&stderr, "stderr", false, "print stderr instead of stdout")
	return cmd
}
