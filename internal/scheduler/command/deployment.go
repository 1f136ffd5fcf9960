package command

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/client"
	"trellis.dev/trellis/internal/httpapi/wire"
	schedclient "trellis.dev/trellis/internal/scheduler/client"
)

// pollEvery is how often --wait reads the deployment.
const pollEvery = 250 * time.Millisecond

func decodeDeployment(r *wire.Resource) (*pbscheduler.Deployment, error) {
	if r == nil {
		return nil, errors.New("the server returned no deployment")
	}
	var d pbscheduler.Deployment
	if err := cli.DecodeData(r, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// maxPollFailures is how many reads in a row --wait lets fail (a server
// restarting, a leader changing) before it gives up: 5 s at pollEvery.
const maxPollFailures = 20

// followDeployment reads a deployment until it ends, printing a progress
// line whenever the line changes, and returns it as it ended. pause waits
// between reads (pollEvery, but tests need not wait). Errors of the
// server's own (4xx) end it at once; others are retried a while.
func followDeployment(ctx context.Context, w io.Writer, get func(context.Context) (*pbscheduler.Deployment, error), pause func(context.Context) error) (*pbscheduler.Deployment, error) {
	last, failures := "", 0
	for {
		d, err := get(ctx)
		switch {
		case err == nil:
			failures = 0
			if line := ProgressLine(d); line != last {
				fmt.Fprintln(w, line)
				last = line
			}
			if !DeploymentRunning(d) {
				return d, nil
			}
		case ctx.Err() != nil || permanent(err):
			return nil, err
		default:
			if failures++; failures >= maxPollFailures {
				return nil, err
			}
		}
		if err := pause(ctx); err != nil {
			return nil, err
		}
	}
}

// permanent reports whether an error will not go away by asking again.
func permanent(err error) bool {
	var ae *client.APIError
	return errors.As(err, &ae) && ae.StatusCode >= 400 && ae.StatusCode < 500 && ae.StatusCode != http.StatusTooManyRequests
}

func sleepFor(d time.Duration) func(context.Context) error {
	return func(ctx context.Context) error {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// reportDeployment says what a deployment that was just started is, and
// with wait follows it to its end: an end other than completed is an
// error.
func reportDeployment(ctx context.Context, call *cli.Call, c *schedclient.Client, envName string, r *wire.Resource, wait bool) (cli.Result, error) {
	d, err := decodeDeployment(r)
	if err != nil {
		return cli.Result{}, err
	}
	id := r.ID.Name
	if !wait {
		return cli.Say("deployment %s of %s version %d (%s) is %s\nFollow it with: trellis deployment get %s %s",
			id, envName, d.GetVersionNumber(), d.GetTaskDefinition(), d.GetStatus(), envName, id).With(map[string]any{"deployment": r}), nil
	}
	progress := call.Stdout
	if call.Format != cli.FormatTable {
		progress = call.Stderr // stdout holds only the JSON or YAML
	} else {
		fmt.Fprintf(call.Stdout, "deployment %s of %s version %d (%s)\n", id, envName, d.GetVersionNumber(), d.GetTaskDefinition())
	}
	ctx, stop := cli.SignalContext(ctx)
	defer stop()
	var final *wire.Resource
	end, err := followDeployment(ctx, progress, func(ctx context.Context) (*pbscheduler.Deployment, error) {
		r, err := c.GetDeployment(ctx, call.Namespace, envName, id)
		if err != nil {
			return nil, err
		}
		final = r
		return decodeDeployment(r)
	}, sleepFor(pollEvery))
	if err != nil {
		if ctx.Err() != nil {
			return cli.Result{}, fmt.Errorf("stopped following deployment %s; it goes on (trellis deployment get %s %s)", id, envName, id)
		}
		return cli.Result{}, err
	}
	// The deployment as it ended is printed (as JSON or YAML) whether it
	// completed or not; then the command fails unless it completed.
	return cli.Result{Value: map[string]any{"deployment": final}}, WaitResult(envName, id, end)
}

func newDeployCmd(e *cli.Env) *cobra.Command {
	return newStartCmd(e, startCmd{
		use:   "deploy ENV [--version V] [--wait]",
		short: "Deploy a version of an environment (the latest by default)",
		long: `Start a deployment of the environment's latest version, or of --version V (a
version number or uuid; trellis env versions lists them). It is pending until
no other deployment of the environment is in progress (a pending one of yours
is canceled), then replaces the tasks in batches, keeping min_healthy_percent
of the instances healthy. The environment becomes active.

--wait follows it until it ends, printing its progress ("in-progress: 2/5
complete"), and exits non-zero unless it completed with its version placed:
a deployment that ends unhealthy or timed-out says why, and, when
auto_rollback started a rollback, the version it returns to and how to
follow it; one that completed while no instance of the group was ready
says "completed: nothing placed: ..." and why.`,
		example: `  trellis deploy log-shipper
  trellis deploy log-shipper --version 3 --wait`,
		versionHelp: "version to deploy: a number or a uuid (default the latest)",
		start:       (*schedclient.Client).StartDeployment,
	})
}

func newRollbackCmd(e *cli.Env) *cobra.Command {
	return newStartCmd(e, startCmd{
		use:   "rollback ENV [--version V] [--wait]",
		short: "Deploy the version before the one deployed (or a given one)",
		long: `Start a deployment of the version before the environment's deployed one, or of
--version V. Refused when there is no earlier version. --wait follows it as
trellis deploy --wait does.`,
		example: `  trellis rollback log-shipper --wait
  trellis rollback log-shipper --version 1`,
		versionHelp: "version to return to: a number or a uuid (default the one before the deployed version)",
		start:       (*schedclient.Client).Rollback,
	})
}

// startCmd is a command that starts a deployment: deploy or rollback.
type startCmd struct {
	use, short, long, example, versionHelp string
	start                                  func(c *schedclient.Client, ctx context.Context, namespace, env, version string) (*wire.Resource, error)
}

func newStartCmd(e *cli.Env, sc startCmd) *cobra.Command {
	var version string
	var wait bool
	return e.Command(cli.ClientCommand{
		Use:     sc.use,
		Short:   sc.short,
		Long:    sc.long,
		Example: sc.example,
		Args:    cobra.ExactArgs(1),
		Flags: func(fs *pflag.FlagSet) {
			fs.StringVar(&version, "version", "", sc.versionHelp)
			fs.BoolVar(&wait, "wait", false, "follow the deployment until it ends; fail unless it completes with its version placed")
		},
		Namespaced: true, Output: true,
		Check: func(*cli.Call) error { return cli.Usage(ParseVersionArg(version)) },
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			c := schedclient.New(call.Client)
			r, err := sc.start(c, ctx, call.Namespace, call.Args[0], version)
			if err != nil {
				return cli.Result{}, envError(err)
			}
			return reportDeployment(ctx, call, c, call.Args[0], r, wait)
		},
	})
}

func newDeploymentCmd(e *cli.Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "deployment",
		Short: "List, show and stop an environment's deployments",
		Long: `A deployment places one version of an environment: pending, in-progress, then
completed, or stopped, canceled, unhealthy or timed-out. Type user (trellis
deploy or rollback), new-instance (an instance started to match) or
health-repair (a task died). Progress reads "x/n complete", or "nothing placed"
for one that ended with no ready instance in its group (its reason says
which instances are down). A failed deployment that auto_rollback followed
reads "unhealthy, rolled back to version N".`,
		Example: `  trellis deployment list log-shipper
  trellis deployment get log-shipper 01jd3k...
  trellis deployment stop log-shipper`,
	}
	cmd.AddCommand(newDeploymentListCmd(e), newDeploymentGetCmd(e), newDeploymentStopCmd(e))
	return cmd
}

func newDeploymentListCmd(e *cli.Env) *cobra.Command {
	return e.Command(cli.ClientCommand{
		Use:        "list ENV",
		Short:      "List an environment's deployments, latest first",
		Example:    `  trellis deployment list log-shipper`,
		Args:       cobra.ExactArgs(1),
		Namespaced: true, Output: true,
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			env := call.Args[0]
			list, err := schedclient.New(call.Client).ListDeployments(ctx, call.Namespace, env)
			if err != nil {
				return cli.Result{}, envError(err)
			}
			value := map[string]any{"deployments": list}
			if call.Format != cli.FormatTable {
				return cli.Result{Value: value}, nil
			}
			if len(list) == 0 {
				return cli.Say("No deployments of %s yet. Deploy it with: trellis deploy %s", env, env), nil
			}
			rows := make([]NamedDeployment, 0, len(list))
			for _, r := range list {
				d, err := decodeDeployment(r)
				if err != nil {
					return cli.Result{}, err
				}
				rows = append(rows, NamedDeployment{ID: r.ID.Name, D: d})
			}
			return cli.Result{Table: func(w io.Writer) error { return WriteDeployments(w, rows, call.Now()) }}, nil
		},
	})
}

func newDeploymentGetCmd(e *cli.Env) *cobra.Command {
	return e.Command(cli.ClientCommand{
		Use:   "get ENV ID",
		Short: "Show a deployment: version, status, progress, and the instances not yet complete",
		Example: `  trellis deployment get log-shipper 01jd3kq8w6r3x0t5v2m4n7p9yb
  trellis deployment get log-shipper 01jd3kq8w6r3x0t5v2m4n7p9yb -o json`,
		Args:       cobra.ExactArgs(2),
		Namespaced: true, Output: true,
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			r, err := schedclient.New(call.Client).GetDeployment(ctx, call.Namespace, call.Args[0], call.Args[1])
			if err != nil {
				return cli.Result{}, deploymentError(err, call.Args[0])
			}
			if call.Format != cli.FormatTable {
				return cli.Result{Value: map[string]any{"deployment": r}}, nil
			}
			d, err := decodeDeployment(r)
			if err != nil {
				return cli.Result{}, err
			}
			return cli.Result{Table: func(w io.Writer) error { return WriteDeployment(w, r.ID.Name, d) }}, nil
		},
	})
}

// deploymentError adds a hint to "not found" from a deployment's
// operations.
func deploymentError(err error, envName string) error {
	if client.IsCode(err, wire.CodeNotFound) {
		return fmt.Errorf("%w (trellis deployment list %s shows its deployments)", err, envName)
	}
	return err
}

func newDeploymentStopCmd(e *cli.Env) *cobra.Command {
	return e.Command(cli.ClientCommand{
		Use:   "stop ENV [ID]",
		Short: "Stop a deployment (by default the environment's deployment in progress)",
		Long: `Halt a deployment. The tasks it has started keep running; the environment
becomes inactive: the scheduler stops acting on it until the next deployment.
Without ID, the environment's deployment in progress is stopped.`,
		Example: `  trellis deployment stop log-shipper
  trellis deployment stop log-shipper 01jd3kq8w6r3x0t5v2m4n7p9yb`,
		Args:       cobra.RangeArgs(1, 2),
		Namespaced: true, Output: true,
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			c := schedclient.New(call.Client)
			envName, id := call.Args[0], ""
			if len(call.Args) == 2 {
				id = call.Args[1]
			} else {
				info, err := getEnvironment(ctx, c, call.Namespace, envName)
				if err != nil {
					return cli.Result{}, err
				}
				if id, err = activeDeploymentID(info); err != nil {
					return cli.Result{}, err
				}
			}
			r, err := c.StopDeployment(ctx, call.Namespace, envName, id)
			if err != nil {
				return cli.Result{}, deploymentError(err, envName)
			}
			value := map[string]any{"deployment": r}
			if call.Format != cli.FormatTable {
				return cli.Result{Value: value}, nil
			}
			d, err := decodeDeployment(r)
			if err != nil {
				return cli.Result{}, err
			}
			if d.GetStatus() == DeploymentCanceled {
				return cli.Say("deployment %s of %s is canceled: it had not started", id, envName), nil
			}
			return cli.Say("deployment %s of %s is %s (%s); the tasks it started keep running, and %s is inactive until the next deployment",
				id, envName, d.GetStatus(), Progress(d), envName), nil
		},
	})
}

// activeDeploymentID is the id of an environment's deployment in
// progress.
func activeDeploymentID(info *schedclient.EnvironmentInfo) (string, error) {
	if r := info.ActiveDeployment; r != nil {
		return r.ID.Name, nil
	}
	envStatus, err := DecodeEnvironmentStatus(info.Environment)
	if err != nil {
		return "", err
	}
	if id := envStatus.GetActiveDeployment(); id != "" {
		return id, nil
	}
	name := info.Environment.ID.Name
	return "", fmt.Errorf("environment %s has no deployment in progress (trellis deployment list %s shows its deployments)", name, name)
}
