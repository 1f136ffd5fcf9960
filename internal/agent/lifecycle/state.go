package lifecycle

import (
	"fmt"
	"reflect"
	"slices"
	"time"

	"trellis.dev/trellis/internal/agent/health"
	"trellis.dev/trellis/internal/driver"
)

// TaskStatus is a task's status, last known or desired.
type TaskStatus string

const (
	TaskPending TaskStatus = "PENDING"
	TaskRunning TaskStatus = "RUNNING"
	TaskStopped TaskStatus = "STOPPED"
)

// ContainerStatus is a container's status as reported.
type ContainerStatus string

const (
	ContainerPending ContainerStatus = "PENDING"
	ContainerRunning ContainerStatus = "RUNNING"
	ContainerStopped ContainerStatus = "STOPPED"
)

// Phase is where a container is in its life; finer than its status, for
// the lifecycle's own bookkeeping.
type Phase string

const (
	// PhaseWaiting: not started yet; waiting for its dependencies.
	PhaseWaiting Phase = "waiting"
	// PhaseStarting: the driver has been asked to start it.
	PhaseStarting Phase = "starting"
	// PhaseRunning: the driver started it and it has not exited.
	PhaseRunning Phase = "running"
	// PhaseExited: it exited, failed to start, or the task stopped before it
	// started; RestartAt says when it starts again, if it does.
	PhaseExited Phase = "exited"
)

func (p Phase) status() ContainerStatus {
	switch p {
	case PhaseRunning:
		return ContainerRunning
	case PhaseExited:
		return ContainerStopped
	default:
		return ContainerPending
	}
}

// up: the container is running or may be at any moment, so a stop must
// wait for it.
func (p Phase) up() bool { return p == PhaseStarting || p == PhaseRunning }

// State is a task's state on the agent: what it reports, and what a
// restarted agent resumes from. It is plain data, serializable as JSON;
// treat a State as a value and do not modify one that Step returned or the
// runner reported.
type State struct {
	TaskID  string `json:"task_id,omitempty"`
	TaskUID string `json:"task_uid,omitempty"`
	// Version grows by one with every change.
	Version uint64 `json:"version"`

	Status        TaskStatus `json:"status"`
	DesiredStatus TaskStatus `json:"desired_status"`
	// StopReason says why the task stopped (or is stopping).
	StopReason string `json:"stop_reason,omitempty"`

	// StartedAt: the task became RUNNING; StoppingAt: the stop began;
	// StoppedAt: the task became STOPPED.
	StartedAt  time.Time `json:"started_at,omitzero"`
	StoppingAt time.Time `json:"stopping_at,omitzero"`
	StoppedAt  time.Time `json:"stopped_at,omitzero"`

	// Containers are in the order of the spec's containers.
	Containers []ContainerState `json:"containers"`
}

// ContainerState is one container's state.
type ContainerState struct {
	Name   string          `json:"name"`
	Status ContainerStatus `json:"status"`
	Phase  Phase           `json:"phase"`

	// Incarnation counts the starts asked of the driver; events name the
	// incarnation they are about, so that news of an earlier one is not
	// taken for the current one.
	Incarnation int `json:"incarnation"`
	// Handle finds the current (or last) incarnation; nil until started.
	Handle *driver.Handle `json:"handle,omitempty"`

	StartedAt  time.Time `json:"started_at,omitzero"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
	// ExitCode is set once the container exited; -1 when unknown.
	ExitCode   *int `json:"exit_code,omitempty"`
	ExitSignal int  `json:"exit_signal,omitempty"`
	OOMKilled  bool `json:"oom_killed,omitempty"`
	// Reason says why the container is stopped when its exit code does not:
	// a start error, a lost container, a task that stopped first.
	Reason string `json:"reason,omitempty"`

	Health health.Tracker `json:"health"`

	// RestartCount counts the restarts started; Restarts holds when the
	// restarts that count against the policy's interval were decided;
	// RestartAt is when a pending restart is due.
	RestartCount int         `json:"restart_count,omitempty"`
	Restarts     []time.Time `json:"restarts,omitempty"`
	RestartAt    time.Time   `json:"restart_at,omitzero"`

	// DrainAt is when a sidecar's DrainSignal was sent.
	DrainAt time.Time `json:"drain_at,omitzero"`
	// TermAt is when SIGTERM was sent; Killed: SIGKILL was sent too.
	TermAt time.Time `json:"term_at,omitzero"`
	Killed bool      `json:"killed,omitempty"`
	// Destroyed: the driver has been asked to destroy Handle.
	Destroyed bool `json:"destroyed,omitempty"`
}

// NewState is the state of a task that has not started.
func NewState(spec TaskSpec) (State, error) {
	if err := spec.Validate(); err != nil {
		return State{}, err
	}
	return newState(spec), nil
}

// newState is NewState for a spec already validated.
func newState(spec TaskSpec) State {
	st := State{
		TaskID:        spec.TaskID,
		TaskUID:       spec.TaskUID,
		Status:        TaskPending,
		DesiredStatus: TaskRunning,
		Containers:    make([]ContainerState, len(spec.Containers)),
	}
	for i, c := range spec.Containers {
		st.Containers[i] = ContainerState{
			Name:   c.Name,
			Status: ContainerPending,
			Phase:  PhaseWaiting,
			Health: health.Tracker{Status: health.Unknown},
		}
	}
	return st
}

// Stopping says whether the task is stopping or stopped.
func (s State) Stopping() bool { return s.DesiredStatus == TaskStopped }

// Done says whether the task is STOPPED and every container it ran has
// been handed to its driver to destroy: the runner's work is over.
func (s State) Done() bool {
	if s.Status != TaskStopped {
		return false
	}
	for _, c := range s.Containers {
		if c.Handle != nil && !c.Destroyed {
			return false
		}
	}
	return true
}

// Container returns the state of the named container.
func (s State) Container(name string) (ContainerState, bool) {
	for _, c := range s.Containers {
		if c.Name == name {
			return c, true
		}
	}
	return ContainerState{}, false
}

// CheckAgainst says whether s is a state of spec: the same containers in
// the same order, each in a phase Step knows. A state saved by an agent of
// another task definition, or damaged, is refused instead of being
// misread.
func (s State) CheckAgainst(spec TaskSpec) error {
	if len(s.Containers) != len(spec.Containers) {
		return fmt.Errorf("state has %d containers, the spec %d", len(s.Containers), len(spec.Containers))
	}
	for i, c := range s.Containers {
		if c.Name != spec.Containers[i].Name {
			return fmt.Errorf("state container %d is %q, the spec's is %q", i, c.Name, spec.Containers[i].Name)
		}
		switch c.Phase {
		case PhaseWaiting, PhaseStarting, PhaseExited:
		case PhaseRunning:
			if c.Handle == nil {
				return fmt.Errorf("state container %q is running but has no handle", c.Name)
			}
		default:
			return fmt.Errorf("state container %q has an unknown phase %q", c.Name, c.Phase)
		}
	}
	return nil
}

// Clone returns a deep copy of s.
func (s State) Clone() State {
	s.Containers = slices.Clone(s.Containers)
	for i := range s.Containers {
		c := &s.Containers[i]
		if c.Handle != nil {
			h := *c.Handle
			h.State = slices.Clone(h.State)
			c.Handle = &h
		}
		if c.ExitCode != nil {
			code := *c.ExitCode
			c.ExitCode = &code
		}
		c.Restarts = slices.Clone(c.Restarts)
	}
	return s
}

// sameAs compares two states but for their versions.
func (s State) sameAs(o State) bool {
	s.Version, o.Version = 0, 0
	return reflect.DeepEqual(s, o)
}
