package orchestrator

import "strings"

// Instance statuses.
const (
	InstanceReady    = "ready"
	InstanceDraining = "draining"
	InstanceDown     = "down"
	InstanceLeft     = "left"
)

// Task statuses: desired (Running, Stopped) and last (all four).
const (
	StatusPending = "PENDING"
	StatusRunning = "RUNNING"
	StatusStopped = "STOPPED"
	StatusLost    = "LOST"
)

// Health values of tasks and containers.
const (
	HealthUnknown   = "UNKNOWN"
	HealthHealthy   = "HEALTHY"
	HealthUnhealthy = "UNHEALTHY"
)

// Dependency conditions, as ECS dependsOn.
const (
	ConditionStart    = "START"
	ConditionHealthy  = "HEALTHY"
	ConditionComplete = "COMPLETE"
	ConditionSuccess  = "SUCCESS"
)

// Drivers a task definition may name.
const (
	DriverExec   = "exec"
	DriverDocker = "docker"
)

// Drivers lists the drivers in the order the CLI shows them.
var Drivers = []string{DriverExec, DriverDocker}

// InstanceStatus is what an instance's status is, from what is known of
// it: left wins over everything, down (no heartbeat) over a drain, and a
// drain over ready.
func InstanceStatus(left, down, drain bool) string {
	switch {
	case left:
		return InstanceLeft
	case down:
		return InstanceDown
	case drain:
		return InstanceDraining
	}
	return InstanceReady
}

// TaskLive reports whether a task still holds its instance: not stopped,
// not lost.
func TaskLive(lastStatus string) bool {
	return lastStatus != StatusStopped && lastStatus != StatusLost
}

// lostPrefix begins the stop reason an agent gives a task the servers
// marked LOST that it does not run.
const lostPrefix = "lost: "

// LostReason is the stop reason of a task marked LOST with its instance
// that the instance's agent, back, does not run.
func LostReason(instance string) string {
	return lostPrefix + "it no longer runs on instance " + instance
}

// IsLostReason reports whether a stop reason is a LostReason.
func IsLostReason(reason string) bool { return strings.HasPrefix(reason, lostPrefix) }
