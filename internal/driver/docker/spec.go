package docker

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/go-connections/nat"

	"trellis.dev/trellis/internal/driver"
)

// The labels on every container the driver creates.
const (
	LabelTask      = "trellis.task"
	LabelTaskUID   = "trellis.task_uid"
	LabelContainer = "trellis.container"
	LabelAgent     = "trellis.agent"
)

const (
	// minMemoryBytes is the smallest memory limit the engine accepts; a
	// smaller one is refused here so that the error names the field.
	minMemoryBytes = 6 << 20

	// The json-file log driver's rotation: at most logMaxFiles files of
	// logMaxSize each per container.
	logMaxSize  = "10m"
	logMaxFiles = "3"

	// hostGateway lets a bridged container reach the host by name.
	hostGateway = "host.docker.internal:host-gateway"
)

// containerName is the docker name of a task's container: readable parts
// first, then a hash of the exact identifiers so that two incarnations (or
// two names that clean to the same text) never share a name. Docker names
// match [a-zA-Z0-9][a-zA-Z0-9_.-]+.
func containerName(taskID, taskUID, containerName string) string {
	sum := sha256.Sum256([]byte(taskID + "\x00" + taskUID + "\x00" + containerName))
	return "trellis-" + cleanName(taskID) + "-" + cleanName(containerName) + "-" + hex.EncodeToString(sum[:5])
}

// cleanName keeps the characters a docker name allows, replaces the others
// with '_', and bounds the length so that names stay readable.
func cleanName(s string) string {
	const maxLen = 40
	var b strings.Builder
	for _, r := range s {
		if b.Len() >= maxLen {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '.', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "_"
	}
	return b.String()
}

// labels are the identifying labels of spec's container: its task and
// its owner's.
func labels(spec driver.Spec, own owner) map[string]string {
	l := own.labels()
	l[LabelTask] = spec.TaskID
	l[LabelTaskUID] = spec.TaskUID
	l[LabelContainer] = spec.Container
	return l
}

// createConfig turns a spec into the engine's create request. It is the
// whole of what a container gets, decided without touching the engine.
func createConfig(spec driver.Spec, own owner, network string) (*container.Config, *container.HostConfig, error) {
	if err := validateSpec(spec); err != nil {
		return nil, nil, err
	}
	cfg := &container.Config{
		Image:      spec.Image,
		Env:        envList(spec.Env),
		WorkingDir: spec.WorkingDir,
		Labels:     labels(spec, own),
		User:       userOf(spec),
	}
	if len(spec.Command) > 0 {
		// The program and its arguments, as for exec: it replaces the
		// image's entrypoint, and with an entrypoint set the engine does
		// not append the image's cmd either.
		cfg.Entrypoint = []string{spec.Command[0]}
		cfg.Cmd = append([]string{}, spec.Command[1:]...)
	}
	host := &container.HostConfig{
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
		LogConfig: container.LogConfig{
			Type:   "json-file",
			Config: map[string]string{"max-size": logMaxSize, "max-file": logMaxFiles},
		},
		Resources: container.Resources{
			Memory:   spec.MemoryBytes,
			NanoCPUs: spec.CPUMillis * 1_000_000,
		},
	}
	if spec.MemoryBytes > 0 {
		host.Resources.MemorySwap = spec.MemoryBytes
	}
	if spec.NetnsHolder != "" {
		// A bridge task: the container joins the namespace its holder
		// keeps, where the task's other containers are; its ports are the
		// task's, published by the agent, and it reaches the host through
		// the bridge's gateway.
		host.NetworkMode = container.NetworkMode("container:" + spec.NetnsHolder)
		return cfg, host, nil
	}
	if network == "host" {
		host.NetworkMode = "host"
		return cfg, host, nil
	}
	if network != "" {
		host.NetworkMode = container.NetworkMode(network)
	}
	host.ExtraHosts = []string{hostGateway}
	if len(spec.Ports) > 0 {
		cfg.ExposedPorts = nat.PortSet{}
		host.PortBindings = nat.PortMap{}
		for _, p := range spec.Ports {
			port := nat.Port(strconv.Itoa(p) + "/tcp")
			cfg.ExposedPorts[port] = struct{}{}
			host.PortBindings[port] = []nat.PortBinding{{HostPort: strconv.Itoa(p)}}
		}
	}
	return cfg, host, nil
}

// userOf is the engine's user ("uid:gid") for the spec; "" keeps the
// image's, and a zero half keeps the image's uid or gid.
func userOf(spec driver.Spec) string {
	switch {
	case spec.User == 0 && spec.Group == 0:
		return ""
	case spec.Group == 0:
		return strconv.FormatUint(uint64(spec.User), 10)
	default:
		return strconv.FormatUint(uint64(spec.User), 10) + ":" + strconv.FormatUint(uint64(spec.Group), 10)
	}
}

// validateSpec refuses what the engine would refuse (or misread), naming
// the field.
func validateSpec(spec driver.Spec) error {
	var errs []error
	for _, f := range []struct{ name, value string }{
		{"TaskID", spec.TaskID}, {"TaskUID", spec.TaskUID}, {"Container", spec.Container}, {"Image", spec.Image},
	} {
		if f.value == "" {
			errs = append(errs, fmt.Errorf("spec.%s: empty", f.name))
		}
	}
	if strings.ContainsAny(spec.Image, " \t\n") {
		errs = append(errs, fmt.Errorf("spec.Image: %q contains white space", spec.Image))
	}
	if len(spec.Command) > 0 && spec.Command[0] == "" {
		errs = append(errs, errors.New("spec.Command[0]: empty program"))
	}
	for k := range spec.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			errs = append(errs, fmt.Errorf("spec.Env[%q]: a name must be non-empty, without '=' or NUL", k))
		}
	}
	if spec.Netns != "" && spec.NetnsHolder == "" {
		errs = append(errs, fmt.Errorf("spec.NetnsHolder: empty, but spec.Netns is set: a docker container joins a task's namespace through its holder container (driver.NetnsHolder), not its path %s", spec.Netns))
	}
	if spec.NetnsHolder != "" && strings.ContainsAny(spec.NetnsHolder, ": /") {
		errs = append(errs, fmt.Errorf("spec.NetnsHolder: %q is not a container id", spec.NetnsHolder))
	}
	if spec.WorkingDir != "" && !path.IsAbs(spec.WorkingDir) {
		errs = append(errs, fmt.Errorf("spec.WorkingDir: %q is not an absolute path", spec.WorkingDir))
	}
	seen := map[int]bool{}
	for i, p := range spec.Ports {
		switch {
		case p < 1 || p > 65535:
			errs = append(errs, fmt.Errorf("spec.Ports[%d]: %d is not a port (1-65535)", i, p))
		case seen[p]:
			errs = append(errs, fmt.Errorf("spec.Ports[%d]: port %d listed twice", i, p))
		}
		seen[p] = true
	}
	if spec.CPUMillis < 0 {
		errs = append(errs, fmt.Errorf("spec.CPUMillis: %d is negative", spec.CPUMillis))
	}
	if spec.MemoryBytes < 0 {
		errs = append(errs, fmt.Errorf("spec.MemoryBytes: %d is negative", spec.MemoryBytes))
	} else if spec.MemoryBytes > 0 && spec.MemoryBytes < minMemoryBytes {
		errs = append(errs, fmt.Errorf("spec.MemoryBytes: %d is below the engine's minimum of %d (6 MiB)", spec.MemoryBytes, minMemoryBytes))
	}
	return errors.Join(errs...)
}

// envList is env as the engine wants it, sorted so that the same spec
// always makes the same request.
func envList(env map[string]string) []string {
	if len(env) == 0 {
		return nil
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
