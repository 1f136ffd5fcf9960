package scheduler

import (
	"time"

	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/resource"
)

// Defaults of a deployment configuration.
const (
	DefaultMinHealthyPercent = 75
	DefaultHealthyDeadline   = 5 * time.Minute
	DefaultProgressDeadline  = 10 * time.Minute
)

// Rollout is a deployment configuration with defaults applied and
// durations parsed.
type Rollout struct {
	MinHealthyPercent int
	MinHealthyTime    time.Duration
	HealthyDeadline   time.Duration
	ProgressDeadline  time.Duration
	AutoRollback      bool
}

// ParseRollout checks a deployment configuration, naming field in its
// errors, and applies the defaults.
func ParseRollout(field string, c *pbscheduler.DeploymentConfig) (Rollout, error) {
	r := Rollout{MinHealthyPercent: DefaultMinHealthyPercent, AutoRollback: c.GetAutoRollback()}
	if c != nil && c.MinHealthyPercent != nil {
		p := c.GetMinHealthyPercent()
		if p < 0 || p > 100 {
			return Rollout{}, resource.NewFieldError(field+".min_healthy_percent", "must be from 0 to 100 (got %d)", p)
		}
		r.MinHealthyPercent = int(p)
	}
	var err error
	if r.MinHealthyTime, err = parseDuration(field+".min_healthy_time", c.GetMinHealthyTime(), 0); err != nil {
		return Rollout{}, err
	}
	if r.HealthyDeadline, err = parseDuration(field+".healthy_deadline", c.GetHealthyDeadline(), DefaultHealthyDeadline); err != nil {
		return Rollout{}, err
	}
	if r.ProgressDeadline, err = parseDuration(field+".progress_deadline", c.GetProgressDeadline(), DefaultProgressDeadline); err != nil {
		return Rollout{}, err
	}
	if r.HealthyDeadline == 0 {
		return Rollout{}, resource.NewFieldError(field+".healthy_deadline", "must be more than 0s")
	}
	if r.ProgressDeadline == 0 {
		return Rollout{}, resource.NewFieldError(field+".progress_deadline", "must be more than 0s")
	}
	if r.MinHealthyTime >= r.HealthyDeadline {
		return Rollout{}, resource.NewFieldError(field+".min_healthy_time", "(%s) must be shorter than healthy_deadline (%s): no task could ever be healthy in time", r.MinHealthyTime, r.HealthyDeadline)
	}
	if r.HealthyDeadline > r.ProgressDeadline {
		return Rollout{}, resource.NewFieldError(field+".healthy_deadline", "(%s) must not be longer than progress_deadline (%s)", r.HealthyDeadline, r.ProgressDeadline)
	}
	return r, nil
}

// BatchSize is how many of n matching instances a rollout replaces at
// once: (100 - min_healthy_percent)% of them, rounded down, at least one.
func (r Rollout) BatchSize(n int) int {
	b := n * (100 - r.MinHealthyPercent) / 100
	return max(b, 1)
}

func parseDuration(field, s string, def time.Duration) (time.Duration, error) {
	if s == "" {
		return def, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, resource.NewFieldError(field, "%q is not a duration (write it like 10s, 5m or 1h)", s)
	}
	if d < 0 {
		return 0, resource.NewFieldError(field, "must not be negative (got %s)", s)
	}
	return d, nil
}
