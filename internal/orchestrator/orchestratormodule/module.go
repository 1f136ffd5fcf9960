// Package orchestratormodule is the orchestrator as a module of the server
// (internal/module): its types, the instance and task controllers, the
// heartbeat tracker and forwarder, the assignments hub, the AgentService
// that agents call and the HeartbeatForwarding that servers call of each
// other, with the permission of each method.
package orchestratormodule

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	pbagent "trellis.dev/trellis/api/agent/v1"
	"trellis.dev/trellis/internal/acl"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/httpapi"
	"trellis.dev/trellis/internal/module"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/orchestrator/assignments"
	"trellis.dev/trellis/internal/orchestrator/command"
	"trellis.dev/trellis/internal/orchestrator/controllers"
	"trellis.dev/trellis/internal/orchestrator/heartbeat"
	"trellis.dev/trellis/internal/orchestrator/taskrun"
	"trellis.dev/trellis/internal/resource"
)

// Config configures the orchestrator's module.
type Config struct {
	// HeartbeatTTL: an instance whose agent is silent this long is marked
	// down (heartbeat.DefaultTTL, 10 s, when zero; at least
	// heartbeat.MinTTL).
	HeartbeatTTL time.Duration
}

// New returns the orchestrator's module, configured by cfg and then by
// its flags (module.Flagged: -heartbeat-ttl), with its commands
// (`trellis instance`, `taskdef`, `task`: cli.Commander).
func New(cfg Config) module.Module { return &orchestratorModule{cfg: cfg} }

type orchestratorModule struct{ cfg Config }

func (*orchestratorModule) Name() string { return "orchestrator" }

func (*orchestratorModule) Register(r *resource.Registry) { orchestrator.Register(r) }

// Flags declares the orchestrator's flags: -heartbeat-ttl, on trellis
// server and trellis dev.
func (m *orchestratorModule) Flags(fs *pflag.FlagSet, p module.Process) {
	def := m.cfg.HeartbeatTTL
	if def == 0 {
		def = heartbeat.DefaultTTL
	}
	fs.DurationVar(&m.cfg.HeartbeatTTL, "heartbeat-ttl", def, "how long an instance's agent may be silent before the instance is marked down and its tasks lost")
}

// CheckFlags refuses a heartbeat TTL below heartbeat.MinTTL.
func (m *orchestratorModule) CheckFlags(module.Settings) error {
	if ttl := m.cfg.HeartbeatTTL; ttl != 0 && ttl < heartbeat.MinTTL {
		return fmt.Errorf("-heartbeat-ttl: %s is below the minimum of %s", ttl, heartbeat.MinTTL)
	}
	return nil
}

// Commands are the orchestrator's commands: instance, taskdef, task.
func (*orchestratorModule) Commands(c cli.CommandEnv) []*cobra.Command {
	return command.Commands(c.Env, c.Types)
}

// agentPermissions is what each AgentService method needs: the agent's
// own calls, agent.
var agentPermissions = map[string]acl.Permission{
	"Register":        acl.Agent,
	"Heartbeat":       acl.Agent,
	"HeartbeatStream": acl.Agent,
	"WatchTasks":      acl.Agent,
}

// forwardingPermissions is what each HeartbeatForwarding method needs:
// ForwardHeartbeats takes batches on another server's word, so it needs
// server, and is served on the server-to-server port only.
var forwardingPermissions = map[string]acl.Permission{
	"ForwardHeartbeats": acl.Server,
}

// Setup builds the orchestrator's server side: the AgentService on the
// public gRPC server, HeartbeatForwarding on the server-to-server one,
// the heartbeat tracker (active while this server leads) and the instance
// and task controllers.
func (m *orchestratorModule) Setup(d module.Deps) (module.Parts, error) {
	if d.Leadership == nil {
		return module.Parts{}, errors.New("needs a backend that knows whether this server leads")
	}
	tracker, err := heartbeat.NewTracker(heartbeat.Config{
		TTL:        m.cfg.HeartbeatTTL,
		Instances:  d.API,
		Leadership: d.Leadership(),
		Registerer: d.Metrics,
		Logger:     d.Logger.With("component", "heartbeat"),
	})
	if err != nil {
		return module.Parts{}, err
	}
	// A follower forwards heartbeats over the Raft backend's pooled
	// connection to the leader's server-to-server port; in memory this
	// server always leads (LeaderConn is nil).
	svc, err := heartbeat.NewService(heartbeat.ServiceConfig{
		Tracker:       tracker,
		LeaderConn:    d.Cluster.LeaderConn,
		LeaderChanged: d.Cluster.LeaderChanged,
		Self:          advertisedPublic(d.Cluster.GRPCAddr, d.Cluster.ServerAddr),
	})
	if err != nil {
		return module.Parts{}, err
	}
	hub, err := assignments.NewHub(d.API, d.Metrics, d.Logger.With("component", "assignments"))
	if err != nil {
		return module.Parts{}, err
	}
	if d.Cluster.LeaderIndex != nil {
		hub.SetClusterIndex(d.Cluster.LeaderIndex)
	}
	ctls, err := controllers.Controllers(controllers.Config{
		API:     d.API,
		Tracker: tracker,
		Cache:   d.Cache,
		Logger:  d.Logger.With("component", "orchestrator"),
	})
	if err != nil {
		return module.Parts{}, err
	}
	logsPublic, logsServer, logsRoute := logParts(d)
	// The task run operation asks the leader's cache who holds host
	// ports on an instance (taskrun.go); the runtime keeps the index.
	if d.Cache != nil {
		if err := d.Cache.Declare(orchestrator.HostPortsCached...); err != nil {
			return module.Parts{}, err
		}
	}
	return module.Parts{
		Controllers:   ctls,
		AgentSessions: agentSessions(d.API),
		PublicServices: []module.Service{{
			Desc: &pbagent.AgentService_ServiceDesc, Impl: agentService{registrar: registrar{api: d.API, now: time.Now}, heartbeats: svc, assignments: hub},
			Permissions: agentPermissions,
		}, logsPublic},
		ServerServices: []module.Service{{
			Desc: &pbagent.HeartbeatForwarding_ServiceDesc, Impl: forwardedHeartbeats{heartbeats: svc},
			Permissions: forwardingPermissions,
		}, logsServer},
		Routes: []httpapi.Route{logsRoute, taskrun.Route(d.API, d.Registry, d.Cache)},
		Runnables: []module.Runnable{
			{Name: "heartbeats", Run: tracker},
			// The forwarder starts after the gRPC servers and stops before
			// them (runnables stop in reverse): a heartbeat arriving once
			// it has stopped is answered Unavailable at once, and one in a
			// batch under way gets its answer, or Unavailable when the
			// call is cut short.
			{Name: "heartbeat-forwarder", Run: svc},
			{Name: "assignments", Run: hub},
		},
	}, nil
}
