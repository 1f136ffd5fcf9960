package orchestrator

import (
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/resource"
)

// Limits of a task's free-text fields, in characters.
const (
	MaxStartedByLength = 256
	MaxReasonLength    = 2048
)

// MutateTask fills the defaults of a new task: it should run. (That
// nothing has happened to it yet is said by its having no status["agent"]:
// TaskStatusOf.)
func MutateTask(res *pbresource.Resource) error {
	return resource.MutateData(res, func(t *pborch.Task) {
		if t.DesiredStatus == "" {
			t.DesiredStatus = StatusRunning
		}
	})
}

// ValidateTask is the Validate hook of orchestrator/v1/Task.
func ValidateTask(res *pbresource.Resource) error {
	t, err := resource.DecodeData[*pborch.Task](res)
	if err != nil {
		return err
	}
	family, rev, err := ParseTaskDefinitionRef(t.GetTaskDefinition())
	if err != nil {
		return resource.NewFieldError("data.task_definition", "%v", err)
	}
	if rev == 0 {
		return resource.NewFieldError("data.task_definition", "%q names no revision: a task runs one revision, %s:N", t.GetTaskDefinition(), family)
	}
	if err := resource.ValidateName("data.instance", t.GetInstance()); err != nil {
		return err
	}
	if r := t.GetReplaces(); r != "" {
		if t.GetEnvironment() == "" {
			return resource.NewFieldError("data.replaces", "names task %q, but only a task of an environment replaces another (data.environment is empty)", r)
		}
		if err := resource.ValidateName("data.replaces", r); err != nil {
			return err
		}
		if r == res.GetId().GetName() {
			return resource.NewFieldError("data.replaces", "names the task itself")
		}
	}
	if utf8.RuneCountInString(t.GetStartedBy()) > MaxStartedByLength {
		return resource.NewFieldError("data.started_by", "is over the limit of %d characters", MaxStartedByLength)
	}
	switch t.GetDesiredStatus() {
	case StatusRunning, StatusStopped:
	default:
		return resource.NewFieldError("data.desired_status", "%q is not RUNNING or STOPPED", t.GetDesiredStatus())
	}
	if utf8.RuneCountInString(t.GetStopReason()) > MaxReasonLength {
		return resource.NewFieldError("data.stop_reason", "is over the limit of %d characters", MaxReasonLength)
	}
	return nil
}

// ValidateTaskStatus checks a TaskStatus, the payload of a Task's
// status["agent"] (the service names its fields under status.data).
func ValidateTaskStatus(m proto.Message) error {
	st, ok := m.(*pborch.TaskStatus)
	if !ok {
		return resource.NewFieldError("", "is not a TaskStatus")
	}
	switch st.GetLastStatus() {
	case StatusPending, StatusRunning, StatusStopped, StatusLost:
	default:
		return resource.NewFieldError("last_status", "%q is not one of PENDING, RUNNING, STOPPED, LOST", st.GetLastStatus())
	}
	if err := validateHealth("health", st.GetHealth()); err != nil {
		return err
	}
	if utf8.RuneCountInString(st.GetStopReason()) > MaxReasonLength {
		return resource.NewFieldError("stop_reason", "is over the limit of %d characters", MaxReasonLength)
	}
	if utf8.RuneCountInString(st.GetSession()) > MaxStartedByLength {
		return resource.NewFieldError("session", "is over the limit of %d characters", MaxStartedByLength)
	}
	for i, c := range st.GetContainers() {
		field := fmt.Sprintf("containers[%d]", i)
		if err := resource.ValidateName(field+".name", c.GetName()); err != nil {
			return err
		}
		switch c.GetStatus() {
		case StatusPending, StatusRunning, StatusStopped:
		default:
			return resource.NewFieldError(field+".status", "%q is not one of PENDING, RUNNING, STOPPED", c.GetStatus())
		}
		if err := validateHealth(field+".health", c.GetHealth()); err != nil {
			return err
		}
		if utf8.RuneCountInString(c.GetReason()) > MaxReasonLength {
			return resource.NewFieldError(field+".reason", "is over the limit of %d characters", MaxReasonLength)
		}
	}
	return nil
}

// ValidateTaskLost is the Validate hook of a Task's
// status["orchestrator-task"].
func ValidateTaskLost(m proto.Message) error {
	l, ok := m.(*pborch.TaskLost)
	if !ok {
		return resource.NewFieldError("", "is not a TaskLost")
	}
	switch n := utf8.RuneCountInString(l.GetReason()); {
	case n == 0:
		return resource.NewFieldError("reason", "is required: say why the task is lost")
	case n > MaxReasonLength:
		return resource.NewFieldError("reason", "is over the limit of %d characters", MaxReasonLength)
	}
	if l.GetLostAt() == nil {
		return resource.NewFieldError("lost_at", "is required")
	}
	return nil
}

func validateHealth(field, h string) error {
	switch h {
	case "", HealthUnknown, HealthHealthy, HealthUnhealthy:
		return nil
	}
	return resource.NewFieldError(field, "%q is not one of HEALTHY, UNHEALTHY, UNKNOWN", h)
}

// ValidateTaskUpdate is the ValidateUpdate hook of orchestrator/v1/Task: a
// placement is fixed (its task definition, instance, started_by and the
// environment, version and deployment that placed it, and the task it
// replaces, never change: a different placement is a new task), and a task asked to stop
// is never asked to run again.
func ValidateTaskUpdate(stored, next *pbresource.Resource) error {
	old, err := resource.DecodeData[*pborch.Task](stored)
	if err != nil {
		return nil // a stored task that does not decode: let Validate speak for next
	}
	t, err := resource.DecodeData[*pborch.Task](next)
	if err != nil {
		return err
	}
	name := next.GetId().GetName()
	for _, f := range []struct{ field, was, now string }{
		{"data.task_definition", old.GetTaskDefinition(), t.GetTaskDefinition()},
		{"data.instance", old.GetInstance(), t.GetInstance()},
		{"data.started_by", old.GetStartedBy(), t.GetStartedBy()},
		{"data.environment", old.GetEnvironment(), t.GetEnvironment()},
		{"data.environment_version", old.GetEnvironmentVersion(), t.GetEnvironmentVersion()},
		{"data.deployment", old.GetDeployment(), t.GetDeployment()},
		{"data.replaces", old.GetReplaces(), t.GetReplaces()},
	} {
		if f.was != f.now {
			return resource.NewFieldError(f.field, "cannot change from %q to %q: task %s is placed; run a new task instead", f.was, f.now, name)
		}
	}
	if old.GetDesiredStatus() == StatusStopped && t.GetDesiredStatus() == StatusRunning {
		return resource.NewFieldError("data.desired_status", "cannot go back to RUNNING: task %s was asked to stop; run a new task instead", name)
	}
	return nil
}
