package lifecycle

import (
	"time"

	"trellis.dev/trellis/internal/agent/health"
)

// TaskMetadata is what the agent's task metadata endpoint serves to a task
// about itself (TRELLIS_TASK_METADATA_URI), as ECS's task metadata
// endpoint does. The seed 000 proxy polls it during a stop to learn when
// the app container has exited.
type TaskMetadata struct {
	TaskID        string              `json:"task_id"`
	TaskUID       string              `json:"task_uid,omitempty"`
	Status        TaskStatus          `json:"status"`
	DesiredStatus TaskStatus          `json:"desired_status"`
	StopReason    string              `json:"stop_reason,omitempty"`
	StartedAt     time.Time           `json:"started_at,omitzero"`
	StoppedAt     time.Time           `json:"stopped_at,omitzero"`
	Containers    []ContainerMetadata `json:"containers"`
}

// ContainerMetadata is one container in TaskMetadata.
type ContainerMetadata struct {
	Name   string          `json:"name"`
	Status ContainerStatus `json:"status"`
	Health health.Status   `json:"health"`
	// ExitCode is set once the container has exited; -1 when unknown.
	ExitCode     *int      `json:"exit_code,omitempty"`
	RestartCount int       `json:"restart_count"`
	StartedAt    time.Time `json:"started_at,omitzero"`
	FinishedAt   time.Time `json:"finished_at,omitzero"`
}

// Metadata is the task's metadata as of s.
func (s State) Metadata() TaskMetadata {
	m := TaskMetadata{
		TaskID:        s.TaskID,
		TaskUID:       s.TaskUID,
		Status:        s.Status,
		DesiredStatus: s.DesiredStatus,
		StopReason:    s.StopReason,
		StartedAt:     s.StartedAt,
		StoppedAt:     s.StoppedAt,
		Containers:    make([]ContainerMetadata, len(s.Containers)),
	}
	for i, c := range s.Containers {
		cm := ContainerMetadata{
			Name:         c.Name,
			Status:       c.Status,
			Health:       c.Health.Status,
			RestartCount: c.RestartCount,
			StartedAt:    c.StartedAt,
			FinishedAt:   c.FinishedAt,
		}
		if cm.Health == "" {
			cm.Health = health.Unknown
		}
		if c.ExitCode != nil {
			code := *c.ExitCode
			cm.ExitCode = &code
		}
		m.Containers[i] = cm
	}
	return m
}

// Container returns the named container's metadata.
func (m TaskMetadata) Container(name string) (ContainerMetadata, bool) {
	for _, c := range m.Containers {
		if c.Name == name {
			return c, true
		}
	}
	return ContainerMetadata{}, false
}

// Exited says whether the named container has stopped: the test the seed
// 000 proxy makes, once told to stop, before it exits itself. While a task
// stops no container is restarted, so then a STOPPED container stays
// stopped. A name the task does not have is not exited.
func (m TaskMetadata) Exited(name string) bool {
	c, ok := m.Container(name)
	return ok && c.Status == ContainerStopped
}
