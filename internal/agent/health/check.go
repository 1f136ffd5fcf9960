package health

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"time"
)

// Defaults of a Check, those of ECS (and of StartInterval, Docker's
// start-interval, shortened so that dependants start promptly).
const (
	DefaultInterval      = 30 * time.Second
	DefaultTimeout       = 5 * time.Second
	DefaultRetries       = 3
	DefaultStartInterval = time.Second
)

// Check is a container's health check: exactly one of Command, HTTP and
// TCP, and its timing. Zero durations and counts take the defaults.
type Check struct {
	// Command runs inside the container; exit code 0 passes.
	Command []string `json:"command,omitempty"`
	// HTTP is a URL to GET; a 2xx or 3xx status passes.
	HTTP string `json:"http,omitempty"`
	// TCP is a host:port to connect to; a connection passes.
	TCP string `json:"tcp,omitempty"`

	// Interval between probes.
	Interval time.Duration `json:"interval,omitempty"`
	// Timeout bounds one probe.
	Timeout time.Duration `json:"timeout,omitempty"`
	// Retries is how many consecutive failures make the container
	// UNHEALTHY.
	Retries int `json:"retries,omitempty"`
	// StartPeriod is the grace period after the container starts during
	// which failures are not counted.
	StartPeriod time.Duration `json:"start_period,omitempty"`
	// StartInterval is the interval between probes during the start
	// period, until one passes; never longer than Interval.
	StartInterval time.Duration `json:"start_interval,omitempty"`
}

// WithDefaults returns c with its zero timings replaced by the defaults.
func (c Check) WithDefaults() Check {
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Retries <= 0 {
		c.Retries = DefaultRetries
	}
	if c.StartInterval <= 0 {
		c.StartInterval = DefaultStartInterval
	}
	c.StartInterval = min(c.StartInterval, c.Interval)
	if c.StartPeriod < 0 {
		c.StartPeriod = 0
	}
	return c
}

// Validate reports the first thing wrong with c, naming the field.
func (c Check) Validate() error {
	kinds := 0
	if len(c.Command) > 0 {
		kinds++
	}
	if c.HTTP != "" {
		kinds++
	}
	if c.TCP != "" {
		kinds++
	}
	if kinds != 1 {
		return errors.New("exactly one of command, http and tcp must be set")
	}
	switch {
	case len(c.Command) > 0:
		if c.Command[0] == "" {
			return errors.New("command: the program (the first element) is empty")
		}
	case c.HTTP != "":
		u, err := url.Parse(c.HTTP)
		if err != nil {
			return fmt.Errorf("http: %q is not a URL: %w", c.HTTP, err)
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return fmt.Errorf("http: %q must use the http or https scheme", c.HTTP)
		}
		if u.Host == "" {
			return fmt.Errorf("http: %q has no host", c.HTTP)
		}
	case c.TCP != "":
		host, port, err := net.SplitHostPort(c.TCP)
		if err != nil {
			return fmt.Errorf("tcp: %q is not host:port: %w", c.TCP, err)
		}
		if host == "" {
			return fmt.Errorf("tcp: %q has no host", c.TCP)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("tcp: %q: port must be a number from 1 to 65535", c.TCP)
		}
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{
		{"interval", c.Interval},
		{"timeout", c.Timeout},
		{"start_period", c.StartPeriod},
		{"start_interval", c.StartInterval},
	} {
		if d.v < 0 {
			return fmt.Errorf("%s: must not be negative, got %s", d.field, d.v)
		}
	}
	if c.Retries < 0 {
		return fmt.Errorf("retries: must not be negative, got %d", c.Retries)
	}
	return nil
}

// Kind names the probe: "command", "http" or "tcp".
func (c Check) Kind() string {
	switch {
	case len(c.Command) > 0:
		return "command"
	case c.HTTP != "":
		return "http"
	default:
		return "tcp"
	}
}
