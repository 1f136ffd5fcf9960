package health

import (
	"time"

	"trellis.dev/trellis/internal/orchestrator"
)

// Status is a container's health, in the words the agent reports it in
// (orchestrator.HealthHealthy, ...): the same words, not a second
// vocabulary, so a status goes into a TaskStatus as it is. What a view
// shows, and what the catalog's checks say, is judged from them by
// orchestrator.TaskHealth and ContainerHealth (catalog.CheckStatusOf).
type Status string

const (
	// Unknown: no check has decided yet, the container has none, or it is
	// not running.
	Unknown   Status = orchestrator.HealthUnknown
	Healthy   Status = orchestrator.HealthHealthy
	Unhealthy Status = orchestrator.HealthUnhealthy
)

// maxOutput bounds the probe output a Tracker keeps, since it travels in
// every report of the task's state.
const maxOutput = 1024

// Result is the outcome of one probe.
type Result struct {
	Pass bool
	// Output says what the probe saw: the command's output, the HTTP
	// status, the connection error.
	Output string
}

// Tracker is the health bookkeeping of one run of a container.
type Tracker struct {
	Status Status `json:"status"`
	// Failures counts the consecutive failures that count (those after the
	// start period, or after a pass).
	Failures int `json:"failures,omitempty"`
	// StartedAt is when the container started: the start period runs from
	// it.
	StartedAt time.Time `json:"started_at,omitzero"`
	// Passed: a probe has passed since the start, which ends the start
	// period.
	Passed bool `json:"passed,omitempty"`
	// Output and CheckedAt are from the last probe.
	Output    string    `json:"output,omitempty"`
	CheckedAt time.Time `json:"checked_at,omitzero"`
}

// NewTracker is the health of a container that started at started.
func NewTracker(started time.Time) Tracker {
	return Tracker{Status: Unknown, StartedAt: started}
}

// InStartPeriod says whether a failure at t falls in the grace period.
func (t Tracker) InStartPeriod(c Check, at time.Time) bool {
	return !t.Passed && at.Before(t.StartedAt.Add(c.StartPeriod))
}

// Record folds the result of a probe made at at into t.
func (t Tracker) Record(c Check, r Result, at time.Time) Tracker {
	c = c.WithDefaults()
	t.Output = truncate(r.Output, maxOutput)
	t.CheckedAt = at
	if r.Pass {
		t.Status = Healthy
		t.Failures = 0
		t.Passed = true
		return t
	}
	if t.InStartPeriod(c, at) {
		return t
	}
	t.Failures++
	if t.Failures >= c.Retries {
		t.Status = Unhealthy
	}
	return t
}

// NextProbe is when the probe after one made at at should run: soon while
// the container is in its start period and nothing has passed yet, else
// after Interval.
func NextProbe(c Check, started time.Time, passed bool, at time.Time) time.Time {
	c = c.WithDefaults()
	if !passed && at.Before(started.Add(c.StartPeriod)) {
		return at.Add(c.StartInterval)
	}
	return at.Add(c.Interval)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
