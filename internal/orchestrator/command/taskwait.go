package command

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/client"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/orchestrator"
)

// DefaultTaskWaitTimeout is how long task wait waits by default: long
// enough for a docker image to be pulled, short enough that a script
// that forgot a task does not hang for good.
const DefaultTaskWaitTimeout = 5 * time.Minute

func newTaskWaitCmd(e *cli.Env) *cobra.Command {
	var (
		status  string
		healthy bool
		timeout time.Duration
	)
	return e.Command(cli.ClientCommand{
		Use:   "wait TASK [--status RUNNING] [--healthy]",
		Short: "Wait until a task's last status is RUNNING (or another, --status), or it is healthy",
		Long: `Wait until the task's last status, as its agent reports it, is --status
(RUNNING by default), then print it; scripts wait with it between trellis task
run and reading what the running task reports (its address, its ports).
--healthy waits until it runs and is healthy too: its health checks passed
(a task without checks is healthy once it runs), for a script that goes on
to call what the task serves, which RUNNING alone does not promise.

It follows the task with a watch, not by polling, and fails at once, saying
what the task became, when the status can no longer come: a task that
STOPPED never runs again, one that left PENDING never goes back, and one
asked to stop before it ran will not run. A LOST task may still come back:
it is waited for. After --timeout it fails, naming the status the task is
in; 0 waits without a limit.`,
		Example: `  trellis task wait 01jd3kq8w6r3x0t5v2m4n7p9yb
  trellis task wait 01jd3kq8w6r3x0t5v2m4n7p9yb --status stopped --timeout 1m
  trellis task wait 01jd3kq8w6r3x0t5v2m4n7p9yb --healthy
  TASK=$(trellis task run --taskdef web --instance dev-1 | cut -d' ' -f2) && trellis task wait "$TASK"`,
		Args: cobra.ExactArgs(1),
		Flags: func(fs *pflag.FlagSet) {
			fs.Var(cli.NewChoice(&status, orchestrator.StatusRunning, "a task status", TaskStatuses...), "status",
				"the last status to wait for: PENDING, RUNNING, STOPPED or LOST")
			fs.BoolVar(&healthy, "healthy", false, "wait until the task runs and is healthy (its health checks passed)")
			fs.DurationVar(&timeout, "timeout", DefaultTaskWaitTimeout, "how long to wait before failing; 0 for no limit")
		},
		Namespaced: true, Output: true,
		Check: func(*cli.Call) error {
			if healthy && status != orchestrator.StatusRunning {
				return cli.Usage(fmt.Errorf("--healthy: only a RUNNING task is healthy, and --status is %s", status))
			}
			if timeout < 0 {
				return cli.Usage(fmt.Errorf("--timeout: %s is negative: give a duration such as 30s, or 0 for no limit", timeout))
			}
			return nil
		},
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			ctx, stop := cli.SignalContext(ctx)
			defer stop()
			want := TaskWant{Status: status, Healthy: healthy}
			r, err := waitForTask(ctx, call.Client, call.Namespace, call.Args[0], want, timeout)
			if err != nil {
				return cli.Result{}, err
			}
			return cli.Say("task %s is %s", r.ID.Name, want).With(r), nil
		},
	})
}

// TaskWant is what task wait waits for: a last status, and with Healthy
// (only with RUNNING) the task's health too.
type TaskWant struct {
	Status  string
	Healthy bool
}

func (w TaskWant) String() string {
	if w.Healthy {
		return w.Status + " and healthy"
	}
	return w.Status
}

// taskState is a task's state as a wait for want names it: its last
// status, and its health while it runs when want asks for it.
func taskState(st *pborch.TaskStatus, want TaskWant) string {
	if h := orchestrator.TaskHealth(st); h != "" && want.Healthy {
		return st.GetLastStatus() + ", health " + h
	}
	return st.GetLastStatus()
}

// TaskWaitVerdict decides, from a task's placement and its state, whether
// a wait for want is over: done when the task is in it,
// an error saying what the task became when it can never be, neither
// while it may still come. It is pure; waitForTask feeds it each change.
//
// What can never come: a STOPPED task never runs again (a task is run
// again as a new task), a task never returns to PENDING, and a task asked
// to stop (desired STOPPED) that does not run now will not run. A LOST
// task is one whose instance stopped reporting; if the instance comes
// back the agent reports it again, RUNNING or STOPPED, so it is waited
// for.
//
// A task that runs but is not healthy yet may become so (its checks have
// not passed yet, or a failing one passes again), so it is waited for.
func TaskWaitVerdict(want TaskWant, t *pborch.Task, st *pborch.TaskStatus) (done bool, err error) {
	last := st.GetLastStatus()
	if last == want.Status && (!want.Healthy || orchestrator.TaskHealth(st) == orchestrator.TaskHealthy) {
		return true, nil
	}
	if last == want.Status {
		return false, nil
	}
	reason := ""
	if r := orchestrator.TaskStopReason(t, st); r != "" {
		reason = " (" + r + ")"
	}
	switch {
	case last == orchestrator.StatusStopped:
		return false, fmt.Errorf("it is STOPPED%s: a stopped task never becomes %s", reason, want)
	case want.Status == orchestrator.StatusPending:
		return false, fmt.Errorf("it is already %s: a task never goes back to PENDING", last)
	case want.Status == orchestrator.StatusRunning && t.GetDesiredStatus() == orchestrator.StatusStopped:
		return false, fmt.Errorf("it is %s and was asked to stop%s: it will not be RUNNING", last, reason)
	}
	return false, nil
}

// waitForTask follows one task with a watch until TaskWaitVerdict says
// the wait is over, and returns the task as it then is. A watch the
// server ends is opened again from where it stopped.
func waitForTask(ctx context.Context, c *client.Client, namespace, name string, want TaskWant, timeout time.Duration) (*wire.Resource, error) {
	// A task that does not exist is named at once, with the hint every
	// task command gives.
	r, t, st, err := readTask(ctx, c, namespace, name)
	if err != nil {
		return nil, err
	}
	fail := func(err error) error {
		return fmt.Errorf("task %s will never be %s: %w (trellis task show %s)", name, want, err, name)
	}
	if done, err := TaskWaitVerdict(want, t, st); done || err != nil {
		if err != nil {
			return nil, fail(err)
		}
		return r, nil
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	last := taskState(st, want)
	opts := client.ListOptions{Namespace: r.ID.Tenancy.Namespace, Prefix: name}
	for {
		got, err := func() (*wire.Resource, error) {
			w, err := c.Watch(ctx, taskWire, opts)
			if err != nil {
				return nil, err
			}
			defer w.Close()
			// A watch from no index begins with a snapshot, which must
			// hold the task; one resumed from an index sends its delete.
			seen := opts.Index != 0
			for {
				ev, err := w.Next()
				if err != nil {
					opts.Index = w.Last
					return nil, err
				}
				if ev.Op != wire.OpEndOfSnapshot && ev.Resource == nil {
					continue
				}
				switch {
				case ev.Op == wire.OpEndOfSnapshot && !seen,
					ev.Op == wire.OpDelete && ev.Resource.ID.Name == name:
					return nil, fmt.Errorf("task %s was deleted before it was %s", name, want)
				case ev.Op != wire.OpUpsert || ev.Resource.ID.Name != name:
					continue
				}
				seen = true
				var t pborch.Task
				if err := cli.DecodeData(ev.Resource, &t); err != nil {
					return nil, err
				}
				st, err := taskStatusOf(ev.Resource)
				if err != nil {
					return nil, err
				}
				last = taskState(st, want)
				ok, err := TaskWaitVerdict(want, &t, st)
				if err != nil {
					return nil, fail(err)
				}
				if ok {
					return ev.Resource, nil
				}
			}
		}()
		switch {
		case got != nil:
			return got, nil
		case ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
			return nil, fmt.Errorf("task %s is still %s after %s, not %s (trellis task show %s)", name, last, timeout, want, name)
		case ctx.Err() != nil:
			return nil, fmt.Errorf("stopped waiting: task %s is %s, not %s", name, last, want)
		case errors.Is(err, client.ErrWatchClosed):
			continue // the server ended the stream: resume from opts.Index
		case client.IsCode(err, wire.CodeGone):
			opts.Index = 0 // too far behind to resume: a fresh snapshot
			continue
		}
		return nil, err
	}
}
