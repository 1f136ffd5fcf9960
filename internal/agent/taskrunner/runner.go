package taskrunner

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"trellis.dev/trellis/internal/agent"
	"trellis.dev/trellis/internal/agent/lifecycle"
	"trellis.dev/trellis/internal/driver"
)

// New makes the runner of one task: an agent.NewRunnerFunc.
func New(rc agent.RunnerConfig) (agent.TaskRunner, error) {
	return newRunner(rc, Build(rc.TaskID, rc.UID, rc.Definition, rc.DriverSpec))
}

// newRunner makes the runner of spec, the lifecycle's spec of rc's task.
func newRunner(rc agent.RunnerConfig, spec lifecycle.TaskSpec) (agent.TaskRunner, error) {
	r := &runner{spec: spec, drivers: rc.Drivers}
	lr, err := lifecycle.NewRunner(lifecycle.Config{
		Spec:    spec,
		Drivers: rc.Drivers,
		Logger:  rc.Logger,
		Report: func(st lifecycle.State) {
			if rc.Report != nil {
				rc.Report(Snapshot(spec, st))
			}
		},
	})
	if err != nil { // the spec is invalid: NewRunner validates it
		return nil, fmt.Errorf("task definition cannot run: %w", err)
	}
	r.lr = lr
	return r, nil
}

type runner struct {
	spec    lifecycle.TaskSpec
	drivers map[string]driver.Driver
	lr      *lifecycle.Runner
}

// Run implements agent.TaskRunner: a fresh start, or a resume from the
// state of the last snapshot.
func (r *runner) Run(ctx context.Context, state json.RawMessage) error {
	if len(state) == 0 {
		return r.lr.Run(ctx)
	}
	var st lifecycle.State
	if err := json.Unmarshal(state, &st); err != nil {
		return fmt.Errorf("saved task state does not decode: %w", err)
	}
	return r.lr.Resume(ctx, st)
}

// Stop implements agent.TaskRunner.
func (r *runner) Stop(reason string) { r.lr.Stop(reason) }

// Logs implements agent.TaskRunner: the container's current (or last)
// incarnation's logs, through its driver.
func (r *runner) Logs(ctx context.Context, container string, stream driver.Stream, follow bool) (io.ReadCloser, error) {
	for i, cs := range r.spec.Containers {
		if cs.Name != container {
			continue
		}
		drv, ok := r.drivers[cs.Driver]
		if !ok {
			return nil, fmt.Errorf("container %s: driver %s is not available here", container, cs.Driver)
		}
		var h driver.Handle
		if st := r.lr.State(); i < len(st.Containers) && st.Containers[i].Handle != nil {
			h = *st.Containers[i].Handle
		} else {
			return nil, fmt.Errorf("container %s: %w: it has no logs yet", container, agent.ErrNotStarted)
		}
		return drv.Logs(ctx, h, cs.Spec, stream, follow)
	}
	return nil, fmt.Errorf("the task has no container %q", container)
}

// Snapshot maps a lifecycle state onto what the agent reports and saves.
func Snapshot(spec lifecycle.TaskSpec, st lifecycle.State) agent.Snapshot {
	state, _ := json.Marshal(st) // plain values: cannot fail
	s := agent.Snapshot{
		Status:     string(st.Status),
		Health:     TaskHealth(spec, st),
		StopReason: st.StopReason,
		StartedAt:  st.StartedAt,
		StoppingAt: st.StoppingAt,
		StoppedAt:  st.StoppedAt,
		State:      state,
	}
	for i, c := range st.Containers {
		hasCheck := i < len(spec.Containers) && spec.Containers[i].Health != nil
		cs := agent.ContainerStatus{
			Name:       c.Name,
			Status:     string(c.Status),
			Health:     containerHealth(hasCheck, c.Health.Status),
			ExitCode:   c.ExitCode,
			Reason:     oomReason(c),
			Restarts:   c.RestartCount,
			StartedAt:  c.StartedAt,
			FinishedAt: c.FinishedAt,
		}
		if c.Handle != nil {
			cs.RuntimeID = c.Handle.ID
		}
		if hasCheck {
			cs.HealthOutput = c.Health.Output
		}
		s.Containers = append(s.Containers, cs)
	}
	return s
}
