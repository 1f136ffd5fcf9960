package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/client"
	"trellis.dev/trellis/internal/httpapi/wire"
)

// pollEvery is how often --wait reads the deployment.
const pollEvery = 250 * time.Millisecond

// writeProto prints a scheduler message as -o json or yaml, as the API
// sends it.
func writeProto(e *env, out string, m proto.Message) error {
	b, err := client.MarshalProto(m)
	if err != nil {
		return err
	}
	return cli.WriteRaw(e.stdout, out, b)
}

func decodeDeployment(r *wire.Resource) (*pbscheduler.Deployment, error) {
	if r == nil {
		return nil, errors.New("the server returned no deployment")
	}
	var d pbscheduler.Deployment
	if err := decodeData(r, &d); err != nil {
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
			if line := cli.ProgressLine(d); line != last {
				fmt.Fprintln(w, line)
				last = line
			}
			if !cli.DeploymentRunning(d) {
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

// reportDeployment prints a deployment that was just started, and with
// wait follows it to its end: an end other than completed is an error.
func reportDeployment(ctx context.Context, e *env, c *client.Client, namespace, envName string, r *wire.Resource, wait bool, out string) error {
	d, err := decodeDeployment(r)
	if err != nil {
		return err
	}
	id := r.ID.Name
	if !wait {
		if out != cli.FormatTable {
			return cli.WriteValue(e.stdout, out, map[string]any{"deployment": r})
		}
		fmt.Fprintf(e.stdout, "deployment %s of %s version %d (%s) is %s\n", id, envName, d.GetVersionNumber(), d.GetTaskDefinition(), d.GetStatus())
		fmt.Fprintf(e.stdout, "Follow it with: trellis deployment get %s %s\n", envName, id)
		return nil
	}
	progress := e.stdout
	if out != cli.FormatTable {
		progress = e.stderr // stdout holds only the JSON or YAML
	} else {
		fmt.Fprintf(e.stdout, "deployment %s of %s version %d (%s)\n", id, envName, d.GetVersionNumber(), d.GetTaskDefinition())
	}
	ctx, stop := signalContext(ctx)
	defer stop()
	var final *wire.Resource
	end, err := followDeployment(ctx, progress, func(ctx context.Context) (*pbscheduler.Deployment, error) {
		r, err := c.GetDeployment(ctx, namespace, envName, id)
		if err != nil {
			return nil, err
		}
		final = r
		return decodeDeployment(r)
	}, sleepFor(pollEvery))
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("stopped following deployment %s; it goes on (trellis deployment get %s %s)", id, envName, id)
		}
		return serverError(c, err)
	}
	if out != cli.FormatTable {
		if err := cli.WriteValue(e.stdout, out, map[string]any{"deployment": final}); err != nil {
			return err
		}
	}
	return cli.WaitResult(envName, id, end)
}

func newDeployCmd(e *env, cf *clientFlags) *cobra.Command {
	return newStartCmd(e, cf, startCmd{
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
		start:       (*client.Client).StartDeployment,
	})
}

func newRollbackCmd(e *env, cf *clientFlags) *cobra.Command {
	return newStartCmd(e, cf, startCmd{
		use:   "rollback ENV [--version V] [--wait]",
		short: "Deploy the version before the one deployed (or a given one)",
		long: `Start a deployment of the version before the environment's deployed one, or of
--version V. Refused when there is no earlier version. --wait follows it as
trellis deploy --wait does.`,
		example: `  trellis rollback log-shipper --wait
  trellis rollback log-shipper --version 1`,
		versionHelp: "version to return to: a number or a uuid (default the one before the deployed version)",
		start:       (*client.Client).Rollback,
	})
}

// startCmd is a command that starts a deployment: deploy or rollback.
type startCmd struct {
	use, short, long, example, versionHelp string
	start                                  func(c *client.Client, ctx context.Context, namespace, env, version string) (*wire.Resource, error)
}

func newStartCmd(e *env, cf *clientFlags, sc startCmd) *cobra.Command {
	var namespace, version, out string
	var wait bool
	cmd := &cobra.Command{
		Use:     sc.use,
		Short:   sc.short,
		Long:    sc.long,
		Example: sc.example,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cli.ParseVersionArg(version); err != nil {
				return usageError{err}
			}
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			r, err := sc.start(c, cmd.Context(), namespace, args[0], version)
			if err != nil {
				return envError(c, err)
			}
			return reportDeployment(cmd.Context(), e, c, namespace, args[0], r, wait, out)
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", `namespace (default "default")`)
	cmd.Flags().StringVar(&version, "version", "", sc.versionHelp)
	cmd.Flags().BoolVar(&wait, "wait", false, "follow the deployment until it ends; fail unless it completes with its version placed")
	addOutputFlag(cmd, &out)
	return cmd
}

func newDeploymentCmd(e *env, cf *clientFlags) *cobra.Command {
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
	cmd.AddCommand(newDeploymentListCmd(e, cf), newDeploymentGetCmd(e, cf), newDeploymentStopCmd(e, cf))
	return cmd
}

func newDeploymentListCmd(e *env, cf *clientFlags) *cobra.Command {
	var namespace, out string
	cmd := &cobra.Command{
		Use:     "list ENV",
		Short:   "List an environment's deployments, latest first",
		Example: `  trellis deployment list log-shipper`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			list, err := c.ListDeployments(cmd.Context(), namespace, args[0])
			if err != nil {
				return envError(c, err)
			}
			if out != cli.FormatTable {
				return cli.WriteValue(e.stdout, out, map[string]any{"deployments": list})
			}
			if len(list) == 0 {
				fmt.Fprintf(e.stdout, "No deployments of %s yet. Deploy it with: trellis deploy %s\n", args[0], args[0])
				return nil
			}
			rows := make([]cli.NamedDeployment, 0, len(list))
			for _, r := range list {
				d, err := decodeDeployment(r)
				if err != nil {
					return err
				}
				rows = append(rows, cli.NamedDeployment{ID: r.ID.Name, D: d})
			}
			return cli.WriteDeployments(e.stdout, rows, e.now())
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", `namespace (default "default")`)
	addOutputFlag(cmd, &out)
	return cmd
}

func newDeploymentGetCmd(e *env, cf *clientFlags) *cobra.Command {
	var namespace, out string
	cmd := &cobra.Command{
		Use:   "get ENV ID",
		Short: "Show a deployment: version, status, progress, and the instances not yet complete",
		Example: `  trellis deployment get log-shipper 01jd3kq8w6r3x0t5v2m4n7p9yb
  trellis deployment get log-shipper 01jd3kq8w6r3x0t5v2m4n7p9yb -o json`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			r, err := c.GetDeployment(cmd.Context(), namespace, args[0], args[1])
			if err != nil {
				return deploymentError(c, err, args[0])
			}
			if out != cli.FormatTable {
				return cli.WriteValue(e.stdout, out, map[string]any{"deployment": r})
			}
			d, err := decodeDeployment(r)
			if err != nil {
				return err
			}
			return cli.WriteDeployment(e.stdout, r.ID.Name, d)
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", `namespace (default "default")`)
	addOutputFlag(cmd, &out)
	return cmd
}

// deploymentError adds a hint to "not found" from a deployment's
// operations.
func deploymentError(c *client.Client, err error, envName string) error {
	if client.IsCode(err, wire.CodeNotFound) {
		return fmt.Errorf("%w (trellis deployment list %s shows its deployments)", err, envName)
	}
	return serverError(c, err)
}

func newDeploymentStopCmd(e *env, cf *clientFlags) *cobra.Command {
	var namespace, out string
	cmd := &cobra.Command{
		Use:   "stop ENV [ID]",
		Short: "Stop a deployment (by default the environment's deployment in progress)",
		Long: `Halt a deployment. The tasks it has started keep running; the environment
becomes inactive: the scheduler stops acting on it until the next deployment.
Without ID, the environment's deployment in progress is stopped.`,
		Example: `  trellis deployment stop log-shipper
  trellis deployment stop log-shipper 01jd3kq8w6r3x0t5v2m4n7p9yb`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			envName, id := args[0], ""
			if len(args) == 2 {
				id = args[1]
			} else {
				info, err := getEnvironment(ctx, c, namespace, envName)
				if err != nil {
					return err
				}
				if id, err = activeDeploymentID(info); err != nil {
					return err
				}
			}
			r, err := c.StopDeployment(ctx, namespace, envName, id)
			if err != nil {
				return deploymentError(c, err, envName)
			}
			if out != cli.FormatTable {
				return cli.WriteValue(e.stdout, out, map[string]any{"deployment": r})
			}
			d, err := decodeDeployment(r)
			if err != nil {
				return err
			}
			if d.GetStatus() == cli.DeploymentCanceled {
				fmt.Fprintf(e.stdout, "deployment %s of %s is canceled: it had not started\n", id, envName)
				return nil
			}
			fmt.Fprintf(e.stdout, "deployment %s of %s is %s (%s); the tasks it started keep running, and %s is inactive until the next deployment\n",
				id, envName, d.GetStatus(), cli.Progress(d), envName)
			return nil
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", `namespace (default "default")`)
	addOutputFlag(cmd, &out)
	return cmd
}

// activeDeploymentID is the id of an environment's deployment in
// progress.
func activeDeploymentID(info *client.EnvironmentInfo) (string, error) {
	if r := info.ActiveDeployment; r != nil {
		return r.ID.Name, nil
	}
	envData, err := decodeEnvironment(info.Environment)
	if err != nil {
		return "", err
	}
	if id := envData.GetActiveDeployment(); id != "" {
		return id, nil
	}
	name := info.Environment.ID.Name
	return "", fmt.Errorf("environment %s has no deployment in progress (trellis deployment list %s shows its deployments)", name, name)
}
