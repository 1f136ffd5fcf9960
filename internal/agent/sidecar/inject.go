package sidecar

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"syscall"

	"google.golang.org/protobuf/proto"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/driver"
	"trellis.dev/trellis/internal/orchestrator"
)

// The injected proxy: its container's name, the uid and gid it runs as
// (the redirect rules skip them), its admin port inside the task (/ready
// answers its health check) and its socket's name in the task directory.
const (
	ContainerName = orchestrator.ProxyContainer
	UID           = 1337
	GID           = 1337
	AdminPort     = orchestrator.ProxyAdminPort
	SocketName    = "proxy.sock"
)

// DrainSignal is what the lifecycle sends the proxy when its task begins
// to stop, while the app still runs (lifecycle.ContainerSpec.DrainSignal):
// the proxy refuses new inbound connections from then on, and exits on
// its SIGTERM, once the app has exited.
const DrainSignal = syscall.SIGUSR1

// The proxy's health check: probed every second during its start period,
// until its first pass lets the app start.
const (
	healthInterval    = "10s"
	healthTimeout     = "2s"
	healthRetries     = 3
	healthStartPeriod = "60s"
)

// Config is what the agent knows that the definition does not.
type Config struct {
	// Executable is the path of the trellis binary the agent runs
	// (os.Executable): the proxy is the same binary.
	Executable string
	// TaskDir is the task's directory on the instance: the agent serves
	// the proxy's snapshots on TaskDir/proxy.sock.
	TaskDir string
	// Task is the task's name (its resource name), which the agent's
	// socket answers Watch for.
	Task string
}

// SocketPath is where the agent serves a task's proxy its snapshots.
func SocketPath(taskDir string) string { return filepath.Join(taskDir, SocketName) }

// ReadyURL is the URL of the proxy's readiness, inside the task's network.
func ReadyURL() string { return "http://127.0.0.1:" + strconv.Itoa(AdminPort) + "/ready" }

// Needed says whether a definition gets the proxy: it has a mesh block
// and network bridge. A host task's ports are the instance's, shared by
// every host task, and the proxy's are fixed (15000, 15001, 19000): a
// host mesh task is registered in the catalog but runs without a proxy.
// (A definition bringing its own proxy, mesh.proxy with Envoy, comes with
// xDS.)
func Needed(td *pborch.TaskDefinition) bool {
	return td.GetMesh() != nil && orchestrator.NetworkMode(td) == orchestrator.NetworkBridge
}

// Inject returns td with the proxy added when it needs one (Needed), and
// td itself when it does not; td is never modified. It refuses, naming the
// field, a mesh definition it cannot run.
func Inject(td *pborch.TaskDefinition, c Config) (*pborch.TaskDefinition, error) {
	if td.GetMesh().GetTransparent() && orchestrator.NetworkMode(td) != orchestrator.NetworkBridge {
		return nil, fmt.Errorf("data.mesh.transparent: needs network %q: the redirect rules are written in the task's own network namespace, and a %s task shares the instance's", orchestrator.NetworkBridge, orchestrator.NetworkMode(td))
	}
	if !Needed(td) {
		return td, nil
	}
	if err := check(td, c); err != nil {
		return nil, err
	}
	out := proto.CloneOf(td)
	for _, ct := range out.Containers {
		ct.DependsOn = append(ct.DependsOn, &pborch.Dependency{Container: ContainerName, Condition: orchestrator.ConditionHealthy})
	}
	out.Containers = append(out.Containers, proxyContainer(c))
	return out, nil
}

func check(td *pborch.TaskDefinition, c Config) error {
	for i, ct := range td.GetContainers() {
		if ct.GetName() == ContainerName {
			return fmt.Errorf("data.containers[%d].name: %q is the name of the sidecar proxy the agent adds to a mesh task: name the container otherwise", i, ContainerName)
		}
	}
	switch {
	case c.Executable == "":
		return errors.New("sidecar proxy: the agent does not know its own executable, which the proxy runs")
	case !filepath.IsAbs(c.Executable):
		return fmt.Errorf("sidecar proxy: the agent's executable %q is not an absolute path", c.Executable)
	case !filepath.IsAbs(c.TaskDir):
		return fmt.Errorf("sidecar proxy: the task directory %q is not an absolute path", c.TaskDir)
	case c.Task == "":
		return errors.New("sidecar proxy: the task has no name")
	}
	return nil
}

func proxyContainer(c Config) *pborch.ContainerDefinition {
	return &pborch.ContainerDefinition{
		Name:   ContainerName,
		Driver: "exec",
		Command: []string{c.Executable, "proxy",
			"-socket", SocketPath(c.TaskDir),
			"-task", c.Task,
		},
		// The task directory is private to the agent; the proxy reads
		// nothing relative to its working directory.
		WorkingDir: "/",
		Essential:  proto.Bool(true),
		Sidecar:    true,
		HealthCheck: &pborch.HealthCheck{
			Http:        ReadyURL(),
			Interval:    healthInterval,
			Timeout:     healthTimeout,
			Retries:     healthRetries,
			StartPeriod: healthStartPeriod,
		},
	}
}

// DriverSpec wraps the agent's mapping of a container onto its
// driver.Spec: the injected proxy runs as UID:GID. It is for a definition
// Inject returned, where no other container bears the proxy's name.
func DriverSpec(base func(*pborch.ContainerDefinition) driver.Spec) func(*pborch.ContainerDefinition) driver.Spec {
	return func(ct *pborch.ContainerDefinition) driver.Spec {
		s := base(ct)
		if ct.GetName() == ContainerName {
			s.User, s.Group = UID, GID
		}
		return s
	}
}
