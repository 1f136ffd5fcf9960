package agent

import (
	"context"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/agent/component"
	"trellis.dev/trellis/internal/agent/healthsync"
	"trellis.dev/trellis/internal/agent/meshinit"
	"trellis.dev/trellis/internal/agent/proxycomp"
	"trellis.dev/trellis/internal/agent/session"
	"trellis.dev/trellis/internal/agent/tasks"
)

// taskSink is the task manager as the server session sees it
// (session.Tasks). Neither package knows the other: the agent joins them
// here, converting the few values they exchange.
type taskSink struct{ *tasks.Manager }

func (t taskSink) Attach(ctx context.Context, read session.DefinitionReader) func() {
	return t.Manager.Attach(ctx, tasks.DefinitionReader(read))
}

func (t taskSink) Reports() []session.Report {
	rs := t.Manager.Reports()
	out := make([]session.Report, len(rs))
	for i, r := range rs {
		out[i] = session.Report(r)
	}
	return out
}

func (t taskSink) Written(r session.Report, stored *pbresource.Resource) {
	t.Manager.Written(tasks.Report(r), stored)
}

// The task manager's types that the agent's users (the runners, the CLI,
// the simulator) name as the agent's.
type (
	TaskRunner      = tasks.TaskRunner
	NewRunnerFunc   = tasks.NewRunnerFunc
	RunnerConfig    = tasks.RunnerConfig
	Snapshot        = tasks.Snapshot
	ContainerStatus = tasks.ContainerStatus
	AdmitFunc       = tasks.AdmitFunc
	Assignment      = tasks.Assignment
	TaskMetadata    = tasks.TaskMetadata
	Clock           = tasks.Clock
)

// ErrNotStarted is what a runner's Logs wraps for a container that has not
// started yet, so it has no logs; the local API answers 409 for it.
var ErrNotStarted = tasks.ErrNotStarted

// BuiltinAttribute reports whether an attribute is one the agent sets
// itself from what it finds on its host (operators cannot set or remove
// those).
func BuiltinAttribute(k string) bool { return session.BuiltinAttribute(k) }

// RotateServers returns servers starting at its i-th (modulo its length)
// and going round: see session.RotateServers.
func RotateServers(servers []string, i int) []string { return session.RotateServers(servers, i) }

// ReadAgentFile reads the local API address a (running or last) agent
// recorded in dataDir.
func ReadAgentFile(dataDir string) (httpAddr string, err error) { return tasks.ReadAgentFile(dataDir) }

// DefaultComponents are the agent's components (package component), in
// the order their Prestarts run for a task (their Poststops run in
// reverse). health-sync comes after mesh-init, so that its Poststop (every
// check critical) runs before mesh-init's removes the instance; the proxy
// component, which serves a mesh task's proxy its snapshots, comes last.
func DefaultComponents() []component.Maker {
	return []component.Maker{meshinit.New, healthsync.New(healthsync.Config{}), proxycomp.New}
}
