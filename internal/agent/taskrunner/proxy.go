package taskrunner

import (
	"fmt"
	"path/filepath"

	"trellis.dev/trellis/internal/agent"
	"trellis.dev/trellis/internal/agent/sidecar"
)

// WithProxy makes runners that add the mesh's sidecar proxy to every
// bridge task with a mesh block (sidecar.Inject): executable is the
// trellis binary the proxy runs (which its user must be able to run),
// dataDir the agent's data dir. A definition Inject refuses stops its task
// with the refusal as its reason. Before the task starts, the directories
// from dataDir down to the task's are made searchable by the proxy's user
// (not readable), so that it reaches its socket there. The proxy is
// signalled to drain when the task begins to stop (sidecar.DrainSignal).
func WithProxy(executable, dataDir string) agent.NewRunnerFunc {
	// The agent makes its data dir absolute (agent.New); so does this.
	if abs, err := filepath.Abs(dataDir); err == nil {
		dataDir = abs
	}
	return func(rc agent.RunnerConfig) (agent.TaskRunner, error) {
		td, err := sidecar.Inject(rc.Definition, sidecar.Config{Executable: executable, TaskDir: rc.Dir, Task: rc.Name})
		if err != nil {
			return nil, err
		}
		if !sidecar.Needed(rc.Definition) {
			return New(rc)
		}
		if err := sidecar.CheckExecutable(executable); err != nil {
			return nil, fmt.Errorf("sidecar proxy: %w", err)
		}
		if err := sidecar.Searchable(dataDir, rc.Dir); err != nil {
			return nil, fmt.Errorf("sidecar proxy: %w", err)
		}
		spec := Build(rc.TaskID, rc.UID, td, sidecar.DriverSpec(rc.DriverSpec))
		for i := range spec.Containers {
			if spec.Containers[i].Name == sidecar.ContainerName {
				spec.Containers[i].DrainSignal = sidecar.DrainSignal
			}
		}
		return newRunner(rc, spec)
	}
}
