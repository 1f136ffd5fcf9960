package tasks

import (
	"errors"
	"slices"
	"sort"
	"time"

	"trellis.dev/trellis/internal/agent/sidecar"
	"trellis.dev/trellis/internal/orchestrator"
)

// What the local API shows of the tasks: plain values, copied under the
// lock.

// TaskMetadata is what a task reads at TRELLIS_TASK_METADATA_URI: its own
// state and its containers', as the agent knows it now (fresher than the
// store).
type TaskMetadata struct {
	Namespace      string `json:"namespace"`
	Name           string `json:"name"`
	UID            string `json:"uid"`
	TaskDefinition string `json:"task_definition"`
	Instance       string `json:"instance"`
	// DesiredStatus is RUNNING or STOPPED; LastStatus PENDING, RUNNING or
	// STOPPED.
	DesiredStatus string            `json:"desired_status"`
	LastStatus    string            `json:"last_status"`
	Health        string            `json:"health"`
	StopReason    string            `json:"stop_reason,omitempty"`
	StartedAt     time.Time         `json:"started_at,omitzero"`
	StoppingAt    time.Time         `json:"stopping_at,omitzero"`
	StoppedAt     time.Time         `json:"stopped_at,omitzero"`
	Containers    []ContainerStatus `json:"containers"`
	// Network is the task's network: its mode, and a bridge task's
	// namespace, address and published ports.
	Network NetworkMetadata `json:"network"`
}

// Metadata is the metadata of the task whose metadata token is token;
// false when no task has it.
func (m *Manager) Metadata(token string) (TaskMetadata, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.tokens[token]
	if e == nil {
		return TaskMetadata{}, false
	}
	s := e.snap
	md := TaskMetadata{
		Namespace:      e.namespace,
		Name:           e.name,
		UID:            e.uid,
		TaskDefinition: orchestrator.TaskDefinitionRef(e.def.GetFamily(), e.def.GetRevision()),
		Instance:       m.cfg.Instance,
		DesiredStatus:  e.stored.GetDesiredStatus(),
		LastStatus:     s.Status,
		Health:         s.Health,
		StopReason:     s.StopReason,
		StartedAt:      s.StartedAt,
		StoppingAt:     s.StoppingAt,
		StoppedAt:      s.StoppedAt,
		Containers:     slices.Clone(s.Containers),
		Network:        networkMetadata(e.def, e.net),
	}
	if md.LastStatus == "" {
		md.LastStatus = orchestrator.StatusPending
	}
	if md.Health == "" {
		md.Health = orchestrator.HealthUnknown
	}
	if e.stopReason != "" || e.deleted {
		md.DesiredStatus = orchestrator.StatusStopped
	}
	if md.Containers == nil {
		md.Containers = []ContainerStatus{}
	}
	return md, true
}

// ErrNoLogs is wrapped by LogRunner's refusals: the task or the container
// is not one whose logs this agent has.
var ErrNoLogs = errors.New("no logs here")

// LogRunner is the runner that reads the logs of container of the task
// namespace/name (the newest of that name), while the agent keeps it.
func (m *Manager) LogRunner(namespace, name, container string) (TaskRunner, error) {
	key := namespace + "/" + name
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.byName[key]
	switch {
	case e == nil:
		return nil, &noLogsError{"task " + key + " is not on instance " + m.cfg.Instance + " (or stopped long ago)"}
	case e.runner == nil:
		return nil, &noLogsError{"task " + key + " has not started on instance " + m.cfg.Instance}
	}
	for _, c := range e.def.GetContainers() {
		if c.GetName() == container {
			return e.runner, nil
		}
	}
	// The sidecar proxy the agent adds to a bridge mesh task.
	if container == sidecar.ContainerName && sidecar.Needed(e.def) {
		return e.runner, nil
	}
	return nil, &noLogsError{"task " + key + " has no container " + container}
}

type noLogsError struct{ msg string }

func (e *noLogsError) Error() string { return e.msg }
func (e *noLogsError) Unwrap() error { return ErrNoLogs }

// TaskView is one task as the agent has it.
type TaskView struct {
	Namespace string
	Name      string
	UID       string
	// Phase is where the agent is with it: idle, starting, running,
	// stopping, done.
	Phase string
	// Status is the last status its runner reported ("" before any).
	Status string
	// Metadata and StoredStatus are the resource's metadata and last
	// status as the store last showed them.
	Metadata     map[string]string
	StoredStatus string
}

// Tasks lists the tasks the agent knows, by namespace and name.
func (m *Manager) Tasks() []TaskView {
	m.mu.Lock()
	out := make([]TaskView, 0, len(m.tasks))
	for _, e := range m.tasks {
		out = append(out, TaskView{
			Namespace: e.namespace, Name: e.name, UID: e.uid, Phase: e.phase.String(), Status: e.snap.Status,
			Metadata: e.res.GetMetadata(), StoredStatus: e.status.GetLastStatus(),
		})
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}
