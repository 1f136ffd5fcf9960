package controllers

import (
	"fmt"
	"sort"
	"time"

	"trellis.dev/trellis/internal/orchestrator"
)

// InstanceState is what the task controller knows of an instance: its
// stored status. An instance that is not stored is absent from the map
// PlanLost takes.
type InstanceState struct {
	Status string
}

// TaskState is what the task controller knows of a task.
type TaskState struct {
	// Key identifies the task to the caller (namespace/name); PlanLost
	// hands it back.
	Key        string
	Instance   string
	LastStatus string
}

// Lost is a task to mark LOST, and why.
type Lost struct {
	Key    string
	Reason string
}

// PlanLost decides which tasks have lost their instance: every live task
// (not STOPPED, not LOST) whose instance is down, has left, or is not
// stored at all. Tasks that have ended are kept whatever became of their
// instance (the scheduler cleans them up); tasks on ready or draining
// instances are the agent's to report. The result is ordered by key.
func PlanLost(instances map[string]InstanceState, tasks []TaskState, ttl time.Duration) []Lost {
	var out []Lost
	for _, t := range tasks {
		if !orchestrator.TaskLive(t.LastStatus) {
			continue
		}
		in, ok := instances[t.Instance]
		var reason string
		switch {
		case !ok:
			reason = fmt.Sprintf("instance %s was removed", t.Instance)
		case in.Status == orchestrator.InstanceDown:
			reason = DownReason(t.Instance, ttl)
		case in.Status == orchestrator.InstanceLeft:
			reason = fmt.Sprintf("instance %s left the cluster", t.Instance)
		default:
			continue
		}
		out = append(out, Lost{Key: t.Key, Reason: reason})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// DownReason is the stop reason of the tasks of an instance marked down.
func DownReason(instance string, ttl time.Duration) string {
	return fmt.Sprintf("instance %s down: no heartbeat for %s", instance, ttl)
}
