package command

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/client"
	"trellis.dev/trellis/internal/driver"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/orchestrator"
)

// TaskStatuses are the values of task list --status, a closed set.
var TaskStatuses = []string{orchestrator.StatusPending, orchestrator.StatusRunning, orchestrator.StatusStopped, orchestrator.StatusLost}

func newTaskCmd(e *cli.Env) *cobra.Command {
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
  trellis task wait 01jd3k... --status running
  trellis task list
  trellis task logs 01jd3k... app -f
  trellis task stop 01jd3k...`,
	}
	cmd.AddCommand(newTaskRunCmd(e), newTaskListCmd(e), newTaskShowCmd(e), newTaskWaitCmd(e), newTaskStopCmd(e), newTaskLogsCmd(e))
	return cmd
}

func newTaskRunCmd(e *cli.Env) *cobra.Command {
	var taskdef, instance, startedBy string
	return e.Command(cli.ClientCommand{
		Use:   "run --taskdef FAMILY[:REVISION] --instance NAME",
		Short: "Place one task on an instance (a one-off placement, before any scheduler)",
		Long: `Place one task of a task definition on a named instance. The instance's agent
sees it at once and starts its containers; trellis task wait TASK waits until
it runs, and trellis task show follows it.

Without a revision the family's latest is used. The server decides the
placement, as the scheduler decides its own, and writes nothing when it
refuses: an instance that is draining, down or gone, and one that cannot run
the task: a driver it lacks, a bridge task where its network.bridge attribute
is not "true", a fixed host port that a live task there (of any namespace)
holds, named with the task.`,
		Example: `  trellis task run --taskdef web:1 --instance node-1
  trellis task run --taskdef web --instance node-2 --started-by release-42`,
		Args: cobra.NoArgs,
		Flags: func(fs *pflag.FlagSet) {
			fs.StringVar(&taskdef, "taskdef", "", "task definition, FAMILY:REVISION (or FAMILY for the latest)")
			fs.StringVar(&instance, "instance", "", "instance to run it on")
			fs.StringVar(&startedBy, "started-by", "", `who started it (recorded as started_by; default "trellis task run")`)
		},
		Namespaced: true, Output: true,
		Check: func(*cli.Call) error {
			if taskdef == "" || instance == "" {
				return cli.Usage(errors.New("--taskdef and --instance are required"))
			}
			return nil
		},
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			c := call.Client
			_, td, err := resolveTaskDef(ctx, c, call.Namespace, taskdef)
			if err != nil {
				return cli.Result{}, err
			}
			// The server decides the placement (POST /v1/tasks/run): it
			// refuses an instance that is not ready, lacks a driver or
			// bridge networking, or where a live task holds a fixed host
			// port the definition publishes, naming them.
			ref := orchestrator.TaskDefinitionRef(td.GetFamily(), td.GetRevision())
			var out struct {
				Task *wire.Resource `json:"task"`
			}
			body := map[string]string{"task_definition": ref, "instance": instance, "started_by": startedBy}
			if err := c.Do(ctx, http.MethodPost, c.URL("/v1/tasks/run", url.Values{"namespace": {call.Namespace}}), body, &out); err != nil {
				return cli.Result{}, err
			}
			return cli.Say("task %s of %s placed on %s", out.Task.ID.Name, ref, instance).With(out.Task), nil
		},
	})
}

func newTaskListCmd(e *cli.Env) *cobra.Command {
	var instance, status string
	return e.Command(cli.ClientCommand{
		Use:   "list",
		Short: "List tasks",
		Example: `  trellis task list
  trellis task list -A --instance node-1 --status RUNNING`,
		Args: cobra.NoArgs,
		Flags: func(fs *pflag.FlagSet) {
			fs.StringVar(&instance, "instance", "", "only tasks on this instance")
			fs.Var(cli.NewChoice(&status, "", "a task status", TaskStatuses...), "status", "only tasks whose last status is this: PENDING, RUNNING, STOPPED or LOST")
		},
		AllNamespaces: true, Output: true,
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			list, err := call.Client.List(ctx, taskWire, client.ListOptions{Namespace: call.Namespace})
			if err != nil {
				return cli.Result{}, err
			}
			rows, err := decodeTasks(list)
			if err != nil {
				return cli.Result{}, err
			}
			kept := rows[:0]
			var keptRes []*wire.Resource
			for _, row := range rows {
				if instance != "" && row.task.GetInstance() != instance {
					continue
				}
				if status != "" && !strings.EqualFold(row.status.GetLastStatus(), status) {
					continue
				}
				kept = append(kept, row)
				keptRes = append(keptRes, row.r)
			}
			value := cli.ResourceList(keptRes, false)
			if len(kept) == 0 {
				return cli.Say("No tasks.").With(value), nil
			}
			return cli.Result{Value: value, Table: func(w io.Writer) error { return writeTaskTable(w, kept, "", call.Now()) }}, nil
		},
	})
}

func newTaskShowCmd(e *cli.Env) *cobra.Command {
	return e.Command(cli.ClientCommand{
		Use:   "show TASK",
		Short: "Show a task and the state of each of its containers",
		Example: `  trellis task show 01jd3kq8w6r3x0t5v2m4n7p9yb
  trellis task show 01jd3kq8w6r3x0t5v2m4n7p9yb -o json`,
		Args:       cobra.ExactArgs(1),
		Namespaced: true, Output: true,
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			r, t, st, err := readTask(ctx, call.Client, call.Namespace, call.Args[0])
			if err != nil {
				return cli.Result{}, err
			}
			if call.Format != cli.FormatTable {
				return cli.Result{Value: r}, nil
			}
			version := ""
			if t.GetEnvironment() != "" {
				version = environmentVersionName(ctx, call.Client, r.ID.Tenancy.Namespace, t.GetEnvironmentVersion())
			}
			return cli.Result{Table: func(w io.Writer) error { return writeTask(w, r, t, st, version) }}, nil
		},
	})
}

// writeTask is the table of task show: what was placed (t) and what its
// agent reports (st); version names the task's environment version.
func writeTask(w io.Writer, r *wire.Resource, t *pborch.Task, st *pborch.TaskStatus, version string) error {
	tw := cli.NewTable(w)
	fmt.Fprintf(tw, "Task:\t%s\n", r.ID.Name)
	fmt.Fprintf(tw, "Namespace:\t%s\n", r.ID.Tenancy.Namespace)
	fmt.Fprintf(tw, "Task definition:\t%s\n", t.GetTaskDefinition())
	fmt.Fprintf(tw, "Instance:\t%s\n", t.GetInstance())
	fmt.Fprintf(tw, "Started by:\t%s\n", cli.Dash(t.GetStartedBy()))
	if t.GetEnvironment() != "" {
		fmt.Fprintf(tw, "Environment:\t%s, version %s, deployment %s\n", t.GetEnvironment(), version, cli.Dash(t.GetDeployment()))
	}
	if t.GetReplaces() != "" {
		fmt.Fprintf(tw, "Replaces:\t%s\n", t.GetReplaces())
	}
	fmt.Fprintf(tw, "Desired status:\t%s\n", t.GetDesiredStatus())
	fmt.Fprintf(tw, "Last status:\t%s\n", st.GetLastStatus())
	fmt.Fprintf(tw, "Health:\t%s\n", TaskHealthDetail(st))
	if reason := orchestrator.TaskStopReason(t, st); reason != "" {
		fmt.Fprintf(tw, "Stop reason:\t%s\n", reason)
	}
	if s := st.GetStartedAt(); s != nil {
		fmt.Fprintf(tw, "Started at:\t%s\n", s.AsTime().Local().Format("2006-01-02 15:04:05.000"))
	}
	if s := st.GetStoppedAt(); s != nil {
		fmt.Fprintf(tw, "Stopped at:\t%s\n", s.AsTime().Local().Format("2006-01-02 15:04:05.000"))
	}
	writeTaskNetwork(tw, st.GetNetwork())
	tw.Flush()
	fmt.Fprintln(w)
	if len(st.GetContainers()) == 0 {
		fmt.Fprintln(w, "No container has been reported yet.")
		return nil
	}
	tw = cli.NewTable(w)
	fmt.Fprintln(tw, "CONTAINER\tSTATUS\tHEALTH\tEXIT\tRESTARTS\tRUNTIME ID\tREASON")
	for _, cs := range st.GetContainers() {
		exit := "-"
		switch {
		case cs.ExitCode == nil:
		case cs.GetExitCode() < 0:
			// A process re-adopted after an agent restart is seen to
			// end, but not its status.
			exit = "unknown"
		default:
			exit = fmt.Sprint(cs.GetExitCode())
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", cs.GetName(), cs.GetStatus(), CheckHealth(cs.GetHealth()), exit, cs.GetRestarts(),
			cli.Dash(shortID(cs.GetRuntimeId())), cli.Dash(cs.GetReason()))
	}
	return tw.Flush()
}

func newTaskStopCmd(e *cli.Env) *cobra.Command {
	var reason string
	return e.Command(cli.ClientCommand{
		Use:     "stop TASK",
		Short:   "Stop a task: its agent sends SIGTERM, then SIGKILL after each container's stop timeout",
		Example: `  trellis task stop 01jd3kq8w6r3x0t5v2m4n7p9yb --reason "replaced by web:3"`,
		Args:    cobra.ExactArgs(1),
		Flags: func(fs *pflag.FlagSet) {
			fs.StringVar(&reason, "reason", "", "why, recorded in the task's stop reason")
		},
		Namespaced: true,
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			name := call.Args[0]
			for attempt := 0; ; attempt++ {
				r, t, st, err := readTask(ctx, call.Client, call.Namespace, name)
				if err != nil {
					return cli.Result{}, err
				}
				if t.GetDesiredStatus() == orchestrator.StatusStopped {
					return cli.Say("task %s is already stopping (last status %s)", name, st.GetLastStatus()), nil
				}
				t.DesiredStatus = orchestrator.StatusStopped
				if t.GetStopReason() == "" {
					t.StopReason = "stopped by user"
					if reason != "" {
						t.StopReason += ": " + reason
					}
				}
				data, err := cli.EncodeData(t)
				if err != nil {
					return cli.Result{}, err
				}
				_, err = call.Client.Write(ctx, client.Ref{Type: taskWire, Namespace: call.Namespace, Name: name}, wire.WriteRequest{Data: data, Metadata: r.Metadata, Version: r.Version})
				if err == nil {
					return cli.Say("task %s is stopping", name), nil
				}
				if !client.IsCode(err, wire.CodeConflict) || attempt == 9 {
					return cli.Result{}, err
				}
			}
		},
	})
}

func newTaskLogsCmd(e *cli.Env) *cobra.Command {
	var follow, stderr bool
	return e.Command(cli.ClientCommand{
		Use:   "logs TASK [CONTAINER]",
		Short: "Print a container's output (the task's only or first container by default)",
		Long: `Print what a container of the task wrote to stdout (or, with --stderr, to
stderr). The servers read them from the agent of the task's instance, over the link
the agent keeps with them, so this works from any machine that reaches the
HTTP API, with the same permission as any read of the namespace
(namespace:read); -f follows them until Ctrl-C.`,
		Example: `  trellis task logs 01jd3k...
  trellis task logs 01jd3k... app -f --stderr`,
		Args: cobra.RangeArgs(1, 2),
		Flags: func(fs *pflag.FlagSet) {
			fs.BoolVarP(&follow, "follow", "f", false, "keep printing new output until Ctrl-C")
			fs.BoolVar(&stderr, "stderr", false, "print stderr instead of stdout")
		},
		Namespaced: true,
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			ctx, stop := cli.SignalContext(ctx)
			defer stop()
			return cli.Result{}, copyLogs(ctx, call, follow, stderr)
		},
	})
}

// copyLogs prints a container's output, read through the servers (GET
// /v1/tasks/{name}/logs/{container}).
func copyLogs(ctx context.Context, call *cli.Call, follow, stderr bool) error {
	c := call.Client
	r, t, _, err := readTask(ctx, c, call.Namespace, call.Args[0])
	if err != nil {
		return err
	}
	container := ""
	if len(call.Args) == 2 {
		container = call.Args[1]
	} else {
		_, td, err := resolveTaskDef(ctx, c, r.ID.Tenancy.Namespace, t.GetTaskDefinition())
		if err != nil {
			return err
		}
		container = td.GetContainers()[0].GetName()
	}
	q := url.Values{"namespace": {r.ID.Tenancy.Namespace}}
	if stderr {
		q.Set("stream", string(driver.Stderr))
	}
	if follow {
		q.Set("follow", "1")
	}
	logs, err := c.Open(ctx, c.URL("/v1/tasks/"+url.PathEscape(r.ID.Name)+"/logs/"+url.PathEscape(container), q))
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("logs of task %s on instance %s: %w", r.ID.Name, t.GetInstance(), err)
	}
	defer logs.Close()
	if _, err := io.Copy(call.Stdout, logs); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}
