package command

import (
	"strings"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/orchestrator"
)

// How tasks' health is shown. The word is orchestrator.TaskHealth's, the
// one the scheduler judges by and `trellis env status` prints, so one task
// never reads "healthy" in one place and "UNKNOWN" in another.

// TaskHealth is the HEALTH cell of `trellis task list`: healthy, unhealthy,
// unknown, or "-" for a task that does not run.
func TaskHealth(t *pborch.TaskStatus) string { return cli.Dash(orchestrator.TaskHealth(t)) }

// TaskHealthDetail is the Health line of `trellis task show`: the word,
// and what it rests on when that is not plain from the containers.
func TaskHealthDetail(t *pborch.TaskStatus) string {
	word := orchestrator.TaskHealth(t)
	switch {
	case word == "":
		return "-"
	case t.GetLastStatus() == orchestrator.StatusLost:
		return word + " (its instance stopped reporting)"
	case !orchestrator.TaskHasChecks(t):
		return word + " (no health checks: healthy once it runs)"
	case word == orchestrator.TaskHealthUnknown:
		return word + " (its health checks have not passed yet)"
	}
	return word
}

// CheckHealth is a container's HEALTH cell: what its health check says, in
// the words above, or "-" for a container without one.
func CheckHealth(s string) string { return cli.Dash(strings.ToLower(s)) }
