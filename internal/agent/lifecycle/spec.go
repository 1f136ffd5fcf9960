package lifecycle

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"trellis.dev/trellis/internal/agent/health"
	"trellis.dev/trellis/internal/driver"
)

// DefaultStopTimeout is how long a container has after its SIGTERM before
// it gets SIGKILL, when its spec says nothing.
const DefaultStopTimeout = 30 * time.Second

// TaskSpec is what to run: the task definition's containers and restart
// policy, for one task.
type TaskSpec struct {
	// TaskID ("namespace/name") and TaskUID (its incarnation) name the task;
	// the runner copies them into each container's driver.Spec where unset.
	TaskID  string
	TaskUID string

	Containers    []ContainerSpec
	RestartPolicy RestartPolicy
}

// ContainerSpec is one container of the task.
type ContainerSpec struct {
	Name string
	// Driver names the driver that runs it: "exec", "docker", "sim".
	Driver string
	// Spec is what the driver starts (command, image, env, ...).
	Spec driver.Spec
	// Essential: the task stops when this container exits and is not
	// restarted.
	Essential bool
	// Sidecar: on stop, the container keeps running until every
	// non-sidecar container has exited.
	Sidecar bool
	// DrainSignal, for a sidecar, is sent to it when a stop begins while
	// other containers still run: the mesh proxy's cue to refuse new
	// inbound connections before its own SIGTERM. Zero: none.
	DrainSignal syscall.Signal
	DependsOn   []Dependency
	Health      *HealthCheck
	// StopTimeout is the time between SIGTERM and SIGKILL; zero means
	// DefaultStopTimeout.
	StopTimeout time.Duration
}

// HealthCheck is a container's health check.
type HealthCheck = health.Check

// Dependency makes a container wait, before its first start, for another
// container to reach a condition.
type Dependency struct {
	Container string
	Condition Condition
}

// Condition is what a dependency waits for, as in ECS dependsOn.
type Condition string

const (
	// Start: the dependency has started.
	CondStart Condition = "START"
	// Healthy: the dependency is running and its health check has passed
	// (a container without a health check counts as healthy once running).
	CondHealthy Condition = "HEALTHY"
	// Complete: the dependency has exited, with any code.
	CondComplete Condition = "COMPLETE"
	// Success: the dependency has exited with code 0.
	CondSuccess Condition = "SUCCESS"
)

func (c Condition) valid() bool {
	switch c {
	case CondStart, CondHealthy, CondComplete, CondSuccess:
		return true
	}
	return false
}

// initCondition: a container others wait on with this condition is an init
// container, meant to run to completion.
func (c Condition) initCondition() bool { return c == CondComplete || c == CondSuccess }

// RestartPolicy says how often an exited container is started again: at
// most Attempts restarts within any Interval (zero: within the life of the
// task), each after Delay, varied by ±Jitter·Delay.
type RestartPolicy struct {
	Attempts int
	Interval time.Duration
	Delay    time.Duration
	// Jitter is a fraction from 0 to 1.
	Jitter float64
}

// stopTimeout is the container's stop timeout with its default.
func (c ContainerSpec) stopTimeout() time.Duration {
	if c.StopTimeout <= 0 {
		return DefaultStopTimeout
	}
	return c.StopTimeout
}

// Validate reports the first thing wrong with the spec, naming the field.
// The runner refuses a spec that does not validate; the agent should have
// had the same errors at registration.
func (s TaskSpec) Validate() error {
	if len(s.Containers) == 0 {
		return errors.New("containers: a task needs at least one container")
	}
	index := make(map[string]int, len(s.Containers))
	essential := false
	for i, c := range s.Containers {
		f := fmt.Sprintf("containers[%d]", i)
		if c.Name == "" {
			return fmt.Errorf("%s.name: must not be empty", f)
		}
		if j, dup := index[c.Name]; dup {
			return fmt.Errorf("%s.name: %q is also the name of containers[%d]", f, c.Name, j)
		}
		index[c.Name] = i
		if c.Driver == "" {
			return fmt.Errorf("%s.driver: must not be empty", f)
		}
		if c.DrainSignal != 0 && !c.Sidecar {
			return fmt.Errorf("%s.drain_signal: only a sidecar is signalled to drain", f)
		}
		if c.StopTimeout < 0 {
			return fmt.Errorf("%s.stop_timeout: must not be negative, got %s", f, c.StopTimeout)
		}
		if c.Health != nil {
			if err := c.Health.Validate(); err != nil {
				return fmt.Errorf("%s.health_check: %w", f, err)
			}
		}
		essential = essential || c.Essential
	}
	if !essential {
		return errors.New("containers: at least one container must be essential")
	}
	for i, c := range s.Containers {
		for j, d := range c.DependsOn {
			f := fmt.Sprintf("containers[%d].depends_on[%d]", i, j)
			if _, ok := index[d.Container]; !ok {
				return fmt.Errorf("%s.container: %q is not a container of the task", f, d.Container)
			}
			if d.Container == c.Name {
				return fmt.Errorf("%s.container: %q depends on itself", f, c.Name)
			}
			if !d.Condition.valid() {
				return fmt.Errorf("%s.condition: %q is not one of START, HEALTHY, COMPLETE, SUCCESS", f, d.Condition)
			}
		}
	}
	if cycle := findCycle(s.Containers, index); cycle != nil {
		return fmt.Errorf("containers: depends_on has a cycle: %s", strings.Join(cycle, " -> "))
	}
	p := s.RestartPolicy
	switch {
	case p.Attempts < 0:
		return fmt.Errorf("restart_policy.attempts: must not be negative, got %d", p.Attempts)
	case p.Interval < 0:
		return fmt.Errorf("restart_policy.interval: must not be negative, got %s", p.Interval)
	case p.Delay < 0:
		return fmt.Errorf("restart_policy.delay: must not be negative, got %s", p.Delay)
	case p.Jitter < 0 || p.Jitter > 1:
		return fmt.Errorf("restart_policy.jitter: must be from 0 to 1, got %g", p.Jitter)
	}
	return nil
}

// findCycle returns the names along a depends_on cycle, the first name
// repeated at the end, or nil.
func findCycle(cs []ContainerSpec, index map[string]int) []string {
	const (
		unseen = iota
		onPath
		done
	)
	mark := make([]int, len(cs))
	var path []string
	var visit func(i int) []string
	visit = func(i int) []string {
		mark[i] = onPath
		path = append(path, cs[i].Name)
		for _, d := range cs[i].DependsOn {
			j := index[d.Container]
			switch mark[j] {
			case onPath:
				for k, n := range path {
					if n == cs[j].Name {
						return append(append([]string(nil), path[k:]...), cs[j].Name)
					}
				}
			case unseen:
				if c := visit(j); c != nil {
					return c
				}
			}
		}
		path = path[:len(path)-1]
		mark[i] = done
		return nil
	}
	for i := range cs {
		if mark[i] == unseen {
			if c := visit(i); c != nil {
				return c
			}
		}
	}
	return nil
}
