package orchestrator

import pborch "trellis.dev/trellis/api/orchestrator/v1"

// A task's health as every view shows it (task list, task show, env
// status) and as the schedulers judge it. The words are lower case, like
// an environment's health and a deployment's status: they are judgements
// made over the reports, where the upper-case words (RUNNING, HEALTHY) are
// what an agent reports (agent/health's Status is those words too). A
// service instance's catalog check (passing, warning, critical) is judged
// from the lower-case words by catalog.CheckStatusOf, nowhere else.
const (
	TaskHealthy       = "healthy"
	TaskUnhealthy     = "unhealthy"
	TaskHealthUnknown = "unknown"
)

// TaskHealth is a task's health by the one rule Trellis schedules by: a
// running task is healthy when its health checks pass, or when it has
// none (healthy once it runs, as ECS and Nomad count a task without
// checks); unhealthy when a check fails; unknown while its checks have not
// passed yet, or once its instance stopped reporting (LOST). A task that
// does not run (PENDING, STOPPED) has no health: "".
//
// The status' health field is something else: what the agent's checks say,
// UNKNOWN for a task without any, as ECS reports it. Views show this
// function's answer, so that one task never reads "healthy" in one place
// and "UNKNOWN" in another.
func TaskHealth(t *pborch.TaskStatus) string {
	switch t.GetLastStatus() {
	case StatusLost:
		return TaskHealthUnknown
	case StatusRunning:
	default:
		return ""
	}
	switch t.GetHealth() {
	case HealthHealthy:
		return TaskHealthy
	case HealthUnhealthy:
		return TaskUnhealthy
	}
	if TaskHasChecks(t) {
		return TaskHealthUnknown // checked, and no check has passed yet
	}
	return TaskHealthy
}

// TaskHasChecks reports whether any container of the task has a health
// check: the agent reports a container's health only then.
func TaskHasChecks(t *pborch.TaskStatus) bool {
	for _, c := range t.GetContainers() {
		if c.GetHealth() != "" {
			return true
		}
	}
	return false
}

// ContainerHealth is the health of one container of a task, by the rule
// of TaskHealth and in its words: what the task's health is built from,
// for whoever judges a container alone (the catalog's check of it,
// catalog.CheckStatusOf). While the task runs, a running container is
// healthy when its check passes or it has none, unhealthy when its check
// fails, unknown while its check has not decided; a container that has
// stopped is unhealthy, one not started yet (or not reported) unknown. A
// LOST task's containers are unknown, and those of a task that does not
// run have no health: "".
func ContainerHealth(t *pborch.TaskStatus, container string) string {
	switch t.GetLastStatus() {
	case StatusLost:
		return TaskHealthUnknown
	case StatusRunning:
	default:
		return ""
	}
	for _, c := range t.GetContainers() {
		if c.GetName() != container {
			continue
		}
		switch c.GetStatus() {
		case StatusRunning:
		case StatusStopped:
			return TaskUnhealthy
		default:
			return TaskHealthUnknown
		}
		switch c.GetHealth() {
		case HealthHealthy, "":
			return TaskHealthy
		case HealthUnhealthy:
			return TaskUnhealthy
		}
		return TaskHealthUnknown
	}
	return TaskHealthUnknown
}
