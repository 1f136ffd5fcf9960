package component

// HealthObserver is a Component that hears how the tasks it prepared are
// doing: health-sync, which keeps the catalog's checks equal to them. The
// task manager calls TaskHealthChanged after the component's Prestart
// returned nil for the task (a resumed task too, whose Prestart completed
// before the agent restarted) and until its Poststop is called, each time
// the task's runner reports a state whose TaskHealth differs from the
// last one given. A component that does not implement it hears nothing.
//
// Calls for one task come one at a time and in order; calls for different
// tasks may come at once. TaskHealthChanged is called on the runner's
// report path: it must return at once (keep the value, do the I/O in
// Start), and must not call the agent.
type HealthObserver interface {
	Component
	TaskHealthChanged(t Task, h TaskHealth)
}

// TaskHealth is a task's health as the agent sees it, in the one
// vocabulary (orchestrator.TaskHealth and ContainerHealth's words:
// healthy, unhealthy, unknown; "" when the task does not run).
type TaskHealth struct {
	// Status is the task's status: PENDING, RUNNING or STOPPED
	// (orchestrator.Status*).
	Status string
	// Stopping: the task was asked to stop (its containers are being
	// stopped), or has stopped; StopReason says why, once known.
	Stopping   bool
	StopReason string
	// Health is the task's health (orchestrator.TaskHealth).
	Health string
	// Containers are its containers, in the definition's order.
	Containers []ContainerHealth
}

// ContainerHealth is one container's health in a TaskHealth.
type ContainerHealth struct {
	Name string
	// HasCheck: the container has a health check.
	HasCheck bool
	// Health is the container's health (orchestrator.ContainerHealth).
	Health string
	// Output is what its health check last said ("" without one).
	Output string
}
