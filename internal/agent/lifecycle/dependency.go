package lifecycle

import (
	"fmt"
	"syscall"

	"trellis.dev/trellis/internal/agent/health"
)

// met says whether a dependency's condition holds, given the state of the
// container depended on and whether it has a health check. Dependencies
// gate a container's first start only: a restart waits for its delay, not
// for its dependencies again.
func met(cond Condition, dep ContainerState, hasCheck bool) bool {
	switch cond {
	case CondStart:
		return !dep.StartedAt.IsZero()
	case CondHealthy:
		// A container without a health check has nothing to wait for once it
		// runs (its health stays UNKNOWN); Kubernetes treats a container
		// without a readiness probe the same way.
		return dep.Phase == PhaseRunning && (!hasCheck || dep.Health.Status == health.Healthy)
	case CondComplete:
		return terminal(dep) && dep.ExitCode != nil
	case CondSuccess:
		return terminal(dep) && dep.ExitCode != nil && *dep.ExitCode == 0
	}
	return false
}

// unsatisfiable says whether a dependency's condition can never hold: the
// container depended on has stopped for good without reaching it.
func unsatisfiable(cond Condition, dep ContainerState) bool {
	if !terminal(dep) {
		return false
	}
	switch cond {
	case CondStart:
		return dep.StartedAt.IsZero()
	case CondHealthy:
		return true
	case CondComplete:
		return dep.ExitCode == nil
	case CondSuccess:
		return dep.ExitCode == nil || *dep.ExitCode != 0
	}
	return true
}

// terminal: the container has exited and will not start again.
func terminal(c ContainerState) bool {
	return c.Phase == PhaseExited && c.RestartAt.IsZero()
}

// completedAsRequired says whether container i is an init container (one
// others wait on with COMPLETE or SUCCESS) whose exit satisfies every such
// wait. Such a container is done: it is not restarted, and its exit does
// not stop the task even if it is essential.
func completedAsRequired(spec TaskSpec, i int, c ContainerState) bool {
	if c.ExitCode == nil {
		return false
	}
	isInit := false
	for _, other := range spec.Containers {
		for _, d := range other.DependsOn {
			if d.Container != spec.Containers[i].Name || !d.Condition.initCondition() {
				continue
			}
			isInit = true
			if d.Condition == CondSuccess && *c.ExitCode != 0 {
				return false
			}
		}
	}
	return isInit
}

// describeExit says how a stopped container ended, to follow its name in a
// reason: "exited with code 1".
func describeExit(c ContainerState) string {
	switch {
	case c.ExitCode == nil && c.Reason != "":
		return c.Reason
	case c.ExitCode == nil:
		return "never started"
	case c.OOMKilled:
		return "was killed for exceeding its memory limit"
	case c.ExitSignal != 0:
		return fmt.Sprintf("was killed by signal %d (%s)", c.ExitSignal, syscall.Signal(c.ExitSignal))
	case *c.ExitCode < 0 && c.Reason != "":
		return "exited with an unknown code (" + c.Reason + ")"
	case *c.ExitCode < 0:
		return "exited with an unknown code"
	default:
		return fmt.Sprintf("exited with code %d", *c.ExitCode)
	}
}
