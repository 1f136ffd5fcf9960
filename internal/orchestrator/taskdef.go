package orchestrator

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/resource"
)

// Defaults and limits of task definitions.
const (
	MaxContainers          = 32
	DefaultStopTimeout     = 30 * time.Second
	DefaultHealthInterval  = 30 * time.Second
	DefaultHealthTimeout   = 5 * time.Second
	DefaultHealthRetries   = 3
	DefaultRestartInterval = 5 * time.Minute
	DefaultRestartDelay    = 5 * time.Second
)

// MutateTaskDefinition fills the defaults: essential containers (true
// unless set, as in ECS), a dependency condition of START, a port
// protocol of tcp, and a mesh block's service (the family) and protocol
// (tcp).
func MutateTaskDefinition(res *pbresource.Resource) error {
	return resource.MutateData(res, func(td *pborch.TaskDefinition) {
		mutateNetwork(td)
		mutateMesh(td)
		for _, c := range td.Containers {
			if c.Essential == nil {
				essential := true
				c.Essential = &essential
			}
			for _, d := range c.DependsOn {
				if d.Condition == "" {
					d.Condition = ConditionStart
				}
			}
		}
	})
}

// ValidateTaskDefinition is the Validate hook of
// orchestrator/v1/TaskDefinition. It refuses everything that would only
// fail later on an agent: unknown drivers, missing images or commands,
// port clashes, dependency cycles, unparsable health checks, ports out of
// range or published twice, and a mesh block the proxy could not serve.
func ValidateTaskDefinition(res *pbresource.Resource) error {
	td, err := resource.DecodeData[*pborch.TaskDefinition](res)
	if err != nil {
		return err
	}
	if err := ValidateFamily("data.family", td.GetFamily()); err != nil {
		return err
	}
	if td.GetRevision() < 1 {
		return resource.NewFieldError("data.revision", "must be 1 or more (got %d)", td.GetRevision())
	}
	if want := TaskDefinitionName(td.GetFamily(), td.GetRevision()); res.GetId().GetName() != want {
		return resource.NewFieldError("id.name", "%q does not match the definition: %s is stored as %q", res.GetId().GetName(), TaskDefinitionRef(td.GetFamily(), td.GetRevision()), want)
	}
	if err := ValidateContainers(td); err != nil {
		return err
	}
	return validateMesh(td)
}

// ValidateContainers checks a task definition's containers, network and
// ports, and restart policy; fields are named from "data.".
func ValidateContainers(td *pborch.TaskDefinition) error {
	cs := td.GetContainers()
	if len(cs) == 0 {
		return resource.NewFieldError("data.containers", "a task needs at least one container")
	}
	if len(cs) > MaxContainers {
		return resource.NewFieldError("data.containers", "has %d containers, over the limit of %d", len(cs), MaxContainers)
	}
	names := make(map[string]int, len(cs))
	ports := make(map[uint32]string)
	essential := false
	for i, c := range cs {
		field := fmt.Sprintf("data.containers[%d]", i)
		if err := resource.ValidateName(field+".name", c.GetName()); err != nil {
			return err
		}
		if j, dup := names[c.GetName()]; dup {
			return resource.NewFieldError(field+".name", "%q is also the name of containers[%d]", c.GetName(), j)
		}
		names[c.GetName()] = i
		if err := validateContainer(field, c); err != nil {
			return err
		}
		for k, p := range c.GetPorts() {
			if p == 0 || p > 65535 {
				return resource.NewFieldError(fmt.Sprintf("%s.ports[%d]", field, k), "%d is not a port: 1 to 65535", p)
			}
			if other, clash := ports[p]; clash {
				return resource.NewFieldError(fmt.Sprintf("%s.ports[%d]", field, k), "port %d clashes with container %q, which also listens on it", p, other)
			}
			ports[p] = c.GetName()
		}
		if c.GetEssential() {
			essential = true
		}
	}
	if !essential {
		return resource.NewFieldError("data.containers", "at least one container must be essential")
	}
	for i, c := range cs {
		for k, d := range c.GetDependsOn() {
			field := fmt.Sprintf("data.containers[%d].depends_on[%d]", i, k)
			if _, ok := names[d.GetContainer()]; !ok {
				return resource.NewFieldError(field+".container", "%q is not a container of this task", d.GetContainer())
			}
			if d.GetContainer() == c.GetName() {
				return resource.NewFieldError(field+".container", "container %q cannot depend on itself", c.GetName())
			}
			switch d.GetCondition() {
			// HEALTHY on a container without a health check is met once it
			// runs: the issue's own example spec has the app wait for a
			// proxy HEALTHY with no check on the proxy.
			case ConditionStart, ConditionHealthy, ConditionComplete, ConditionSuccess:
			default:
				return resource.NewFieldError(field+".condition", "%q is not a condition: one of START, HEALTHY, COMPLETE, SUCCESS", d.GetCondition())
			}
		}
	}
	if cycle := dependencyCycle(cs); cycle != nil {
		return resource.NewFieldError("data.containers", "depends_on has a cycle: %s", strings.Join(cycle, " -> "))
	}
	if err := validateNetwork(td); err != nil {
		return err
	}
	return validateRestartPolicy(td.GetRestartPolicy())
}

func validateContainer(field string, c *pborch.ContainerDefinition) error {
	switch c.GetDriver() {
	case DriverExec:
		if len(c.GetCommand()) == 0 || c.GetCommand()[0] == "" {
			return resource.NewFieldError(field+".command", "is required by the exec driver: the program and its arguments")
		}
		if c.GetImage() != "" {
			return resource.NewFieldError(field+".image", "is for the docker driver; the exec driver runs command on the host")
		}
	case DriverDocker:
		if c.GetImage() == "" {
			return resource.NewFieldError(field+".image", "is required by the docker driver (name:tag, already on the host)")
		}
		if strings.ContainsAny(c.GetImage(), " \t\n") {
			return resource.NewFieldError(field+".image", "%q is not an image reference", c.GetImage())
		}
	case "":
		return resource.NewFieldError(field+".driver", "is required: one of %s", strings.Join(Drivers, ", "))
	default:
		return resource.NewFieldError(field+".driver", "%q is not a driver: one of %s", c.GetDriver(), strings.Join(Drivers, ", "))
	}
	for k := range c.GetEnv() {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return resource.NewFieldError(field+".env", "%q is not an environment variable name", k)
		}
	}
	if _, err := parseDuration(field+".stop_timeout", c.GetStopTimeout(), DefaultStopTimeout); err != nil {
		return err
	}
	if r := c.GetResources(); r.GetCpuMillis() < 0 || r.GetMemoryBytes() < 0 {
		return resource.NewFieldError(field+".resources", "cannot be negative")
	}
	if m := c.GetResources().GetMemoryBytes(); m > 0 && m < 4<<20 {
		return resource.NewFieldError(field+".resources.memory_bytes", "%d is below the minimum of 4 MiB", m)
	}
	if h := c.GetHealthCheck(); h != nil {
		if _, err := HealthCheckSettings(field+".health_check", h); err != nil {
			return err
		}
	}
	return nil
}

// HealthSettings are a health check's timings with defaults applied.
type HealthSettings struct {
	Interval, Timeout, StartPeriod time.Duration
	Retries                        int
}

// HealthCheckSettings validates a health check and returns its timings.
func HealthCheckSettings(field string, h *pborch.HealthCheck) (HealthSettings, error) {
	kinds := 0
	if len(h.GetCommand()) > 0 {
		kinds++
	}
	if h.GetHttp() != "" {
		kinds++
		u, err := url.Parse(h.GetHttp())
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return HealthSettings{}, resource.NewFieldError(field+".http", "%q is not an http:// or https:// URL", h.GetHttp())
		}
	}
	if h.GetTcp() != "" {
		kinds++
		host, port, err := net.SplitHostPort(h.GetTcp())
		if err != nil || host == "" || port == "" {
			return HealthSettings{}, resource.NewFieldError(field+".tcp", "%q is not host:port", h.GetTcp())
		}
	}
	if kinds != 1 {
		return HealthSettings{}, resource.NewFieldError(field, "needs exactly one of command, http or tcp (got %d)", kinds)
	}
	var s HealthSettings
	var err error
	if s.Interval, err = parseDuration(field+".interval", h.GetInterval(), DefaultHealthInterval); err != nil {
		return s, err
	}
	if s.Timeout, err = parseDuration(field+".timeout", h.GetTimeout(), DefaultHealthTimeout); err != nil {
		return s, err
	}
	if s.StartPeriod, err = parseDurationZero(field+".start_period", h.GetStartPeriod()); err != nil {
		return s, err
	}
	if s.Interval <= 0 || s.Timeout <= 0 {
		return s, resource.NewFieldError(field, "interval and timeout must be positive")
	}
	if s.Timeout > s.Interval {
		return s, resource.NewFieldError(field+".timeout", "%s is longer than the interval %s", s.Timeout, s.Interval)
	}
	switch r := h.GetRetries(); {
	case r < 0 || r > 100:
		return s, resource.NewFieldError(field+".retries", "%d is not 0 to 100", r)
	case r == 0:
		s.Retries = DefaultHealthRetries
	default:
		s.Retries = int(r)
	}
	return s, nil
}

// RestartSettings are a restart policy with defaults applied.
type RestartSettings struct {
	Attempts        int
	Interval, Delay time.Duration
}

// RestartPolicySettings returns a (valid) restart policy's settings. No
// policy means no restarts.
func RestartPolicySettings(p *pborch.RestartPolicy) RestartSettings {
	s, _ := restartSettings(p)
	return s
}

func validateRestartPolicy(p *pborch.RestartPolicy) error {
	_, err := restartSettings(p)
	return err
}

func restartSettings(p *pborch.RestartPolicy) (RestartSettings, error) {
	if p == nil {
		return RestartSettings{}, nil
	}
	var s RestartSettings
	var err error
	if p.GetAttempts() < 0 || p.GetAttempts() > 1000 {
		return s, resource.NewFieldError("data.restart_policy.attempts", "%d is not 0 to 1000", p.GetAttempts())
	}
	s.Attempts = int(p.GetAttempts())
	if s.Interval, err = parseDuration("data.restart_policy.interval", p.GetInterval(), DefaultRestartInterval); err != nil {
		return s, err
	}
	if s.Delay, err = parseDurationZero("data.restart_policy.delay", p.GetDelay()); err != nil {
		return s, err
	}
	if p.GetDelay() == "" {
		s.Delay = DefaultRestartDelay
	}
	if s.Interval <= 0 {
		return s, resource.NewFieldError("data.restart_policy.interval", "must be positive")
	}
	return s, nil
}

// StopTimeout returns a container's stop timeout (validated).
func StopTimeout(c *pborch.ContainerDefinition) time.Duration {
	d, _ := parseDuration("", c.GetStopTimeout(), DefaultStopTimeout)
	return d
}

func parseDuration(field, s string, def time.Duration) (time.Duration, error) {
	if s == "" {
		return def, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, resource.NewFieldError(field, "%q is not a duration such as 30s or 5m", s)
	}
	if d <= 0 {
		return 0, resource.NewFieldError(field, "%q must be positive", s)
	}
	return d, nil
}

func parseDurationZero(field, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, resource.NewFieldError(field, "%q is not a duration such as 30s or 5m", s)
	}
	if d < 0 {
		return 0, resource.NewFieldError(field, "%q cannot be negative", s)
	}
	return d, nil
}

// dependencyCycle returns the containers of a depends_on cycle, the first
// repeated at the end ("a -> b -> a"), or nil. Containers are visited in
// definition order, so the answer is stable.
func dependencyCycle(cs []*pborch.ContainerDefinition) []string {
	deps := make(map[string][]string, len(cs))
	for _, c := range cs {
		for _, d := range c.GetDependsOn() {
			deps[c.GetName()] = append(deps[c.GetName()], d.GetContainer())
		}
	}
	const (
		unseen = iota
		onPath
		done
	)
	state := make(map[string]int, len(cs))
	var path []string
	var visit func(n string) []string
	visit = func(n string) []string {
		state[n] = onPath
		path = append(path, n)
		for _, m := range deps[n] {
			switch state[m] {
			case onPath:
				start := slices.Index(path, m)
				return append(slices.Clone(path[start:]), m)
			case unseen:
				if c := visit(m); c != nil {
					return c
				}
			}
		}
		path = path[:len(path)-1]
		state[n] = done
		return nil
	}
	for _, c := range cs {
		if state[c.GetName()] == unseen {
			if cycle := visit(c.GetName()); cycle != nil {
				return cycle
			}
		}
	}
	return nil
}
