package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"path/filepath"
	"time"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/driver"
)

// TaskRunner runs one task's containers: the task lifecycle (depends_on
// order, health checks, restarts, stop sequencing) over the drivers. The
// agent makes one per task with Config.NewRunner and drives it through
// this interface only.
//
// The contract:
//   - Run is called once. With state nil it starts the task from the
//     beginning; otherwise state is the State of the last Snapshot the
//     runner reported before the agent restarted, and Run re-attaches to
//     the containers it describes (those that are gone are handled as
//     exits: restarted or not by the policy) instead of starting them
//     again.
//   - Run returns nil once the task has stopped and everything it held is
//     released; its last Snapshot then has Status STOPPED (if it has not,
//     the agent reports STOPPED with Run's error as the reason). It
//     returns ctx's error when ctx ends first: then the containers keep
//     running, because the agent is only restarting, and a later Run with
//     the saved state picks them up.
//   - Stop asks for a graceful stop (SIGTERM, the stop timeout, SIGKILL;
//     sidecars last) and returns at once. It may be called more than once
//     and before Run; the first reason is the task's stop reason.
//   - Report (in RunnerConfig) is called with every change, serially, and
//     must not be called after Run has returned.
//   - Logs reads a container's log stream; it works while the runner is
//     referenced, after Run has returned too, so that the logs of a task
//     that stopped can still be read.
type TaskRunner interface {
	Run(ctx context.Context, state json.RawMessage) error
	Stop(reason string)
	Logs(ctx context.Context, container string, stream driver.Stream, follow bool) (io.ReadCloser, error)
}

// ErrNotStarted is what a runner's Logs wraps for a container that has not
// started yet, so it has no logs; the local API answers 409 for it.
var ErrNotStarted = errors.New("the container has not started")

// NewRunnerFunc makes the runner of one task. An error is final for the
// task: the agent reports it STOPPED with the error as its reason.
type NewRunnerFunc func(RunnerConfig) (TaskRunner, error)

// RunnerConfig is everything a runner gets about its task.
type RunnerConfig struct {
	// TaskID is "namespace/name"; Namespace, Name and UID are its parts.
	TaskID    string
	Namespace string
	Name      string
	UID       string
	// Definition is the task's definition (immutable).
	Definition *pborch.TaskDefinition
	// Drivers are the agent's drivers by name.
	Drivers map[string]driver.Driver
	// Env is added to every container's environment (over the
	// definition's): TRELLIS_TASK_METADATA_URI and the task's identity.
	Env map[string]string
	// Dir is the task's private directory; LogDir (inside it) is where its
	// logs go. Both exist when the runner is made.
	Dir    string
	LogDir string
	// Netns is a bridge task's network namespace, where every container
	// runs; Holder the container holding it, for a driver that joins
	// through it (driver.NetnsHolder). Both "" for a host task.
	Netns  string
	Holder string
	// Report receives the task's state at every change.
	Report func(Snapshot)
	Logger *slog.Logger
	Clock  Clock
}

// DriverSpec is the driver.Spec of one of the task's containers: the
// definition's fields, the agent's environment over the container's own,
// and the task's directories. Runners should start containers with it.
func (rc RunnerConfig) DriverSpec(c *pborch.ContainerDefinition) driver.Spec {
	env := maps.Clone(c.GetEnv())
	if env == nil {
		env = make(map[string]string, len(rc.Env))
	}
	maps.Copy(env, rc.Env)
	ports := make([]int, len(c.GetPorts()))
	for i, p := range c.GetPorts() {
		ports[i] = int(p)
	}
	return driver.Spec{
		TaskID:      rc.TaskID,
		TaskUID:     rc.UID,
		Container:   c.GetName(),
		Image:       c.GetImage(),
		Command:     c.GetCommand(),
		Env:         env,
		WorkingDir:  c.GetWorkingDir(),
		Ports:       ports,
		CPUMillis:   c.GetResources().GetCpuMillis(),
		MemoryBytes: c.GetResources().GetMemoryBytes(),
		LogDir:      rc.LogDir,
		TaskDir:     rc.Dir,
		Netns:       rc.Netns,
		NetnsHolder: rc.Holder,
	}
}

// Snapshot is a task's state as its runner reports it.
type Snapshot struct {
	// Status is PENDING, RUNNING or STOPPED.
	Status string `json:"status"`
	// Health is HEALTHY, UNHEALTHY or UNKNOWN over the containers that
	// have health checks ("" means UNKNOWN).
	Health     string            `json:"health,omitempty"`
	StopReason string            `json:"stop_reason,omitempty"`
	Containers []ContainerStatus `json:"containers,omitempty"`
	StartedAt  time.Time         `json:"started_at,omitzero"`
	StoppingAt time.Time         `json:"stopping_at,omitzero"`
	StoppedAt  time.Time         `json:"stopped_at,omitzero"`
	// State is the runner's own state, opaque to the agent: it is saved
	// with the task and handed back to Run after an agent restart.
	State json.RawMessage `json:"state,omitempty"`
}

// ContainerStatus is one container in a Snapshot.
type ContainerStatus struct {
	Name string `json:"name"`
	// Status is PENDING, RUNNING or STOPPED; Health HEALTHY, UNHEALTHY or
	// UNKNOWN ("" when it has no health check).
	Status string `json:"status"`
	Health string `json:"health,omitempty"`
	// HealthOutput is what its health check last said.
	HealthOutput string `json:"health_output,omitempty"`
	// ExitCode is set once it has exited; -1 when the code is unknown.
	ExitCode   *int      `json:"exit_code,omitempty"`
	Reason     string    `json:"reason,omitempty"`
	Restarts   int       `json:"restarts,omitempty"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
	// RuntimeID is the pid (exec) or container id (docker).
	RuntimeID string `json:"runtime_id,omitempty"`
}

// AdmitFunc decides whether a task may start on this instance, given the
// tasks the agent runs (starting, running or stopping). A refusal is
// final: the task is reported STOPPED with the error as its reason. It is
// the hook for "one and only one copy per instance": the daemon scheduler
// refuses a second task of the same owner.
//
// Admissions are serialized (the agent holds its lock around the call, so
// two tasks cannot both be admitted against the same live set): the
// function must be quick, and must not call the Agent.
type AdmitFunc func(candidate Assignment, live []Assignment) error

// Assignment is a task placed on this instance, as the store has it.
type Assignment struct {
	// ID is the task's id, uid included.
	ID       *pbresource.ID
	Owner    *pbresource.ID
	Metadata map[string]string
	Task     *pborch.Task
}

// TaskDir is where the files of the task with uid live under the data dir
// (its runner's directory; logs/ inside).
func TaskDir(dataDir, uid string) string { return filepath.Join(dataDir, "tasks", uid) }
