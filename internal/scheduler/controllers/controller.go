package controllers

import (
	"errors"
	"log/slog"
	"sync"
	"time"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/scheduler"
)

// ControllerName is the daemon scheduler's controller: the owner of the
// environment's status key of that name.
const ControllerName = scheduler.StatusKey

// Tunables of the controller.
const (
	// writeChunk bounds the members of one WriteBatch.
	writeChunk = 1000
	// keepDeployments is how many finished deployments an environment
	// keeps.
	keepDeployments = 50
	// maxDeletes bounds the old tasks and deployments one reconcile
	// deletes.
	maxDeletes = 200
	// DefaultResync is how often every environment is reconciled even
	// when nothing changed.
	DefaultResync = time.Minute
)

// pacing bounds the leader's CPU under a stream of changes (a fleet
// reporting thousands of tasks): under a stream, one environment's runs
// work at most a third of the time, as after a run that worked for w the
// next waits 2w. A run's work leaves out its waits for its writes to
// commit (marked with controller.Waiting), which cost the leader no CPU:
// counting them made the pause longer than the bound needs, and each batch
// of a rollout waited it out. The burst lets changes that come more slowly
// than that (an instance joins, a task dies) run at once: without it, each
// waited out the hold after the run before it (bench/README.md). Each run
// handles every change since the last, so this bounds the CPU without
// slowing what a run achieves; small environments (runs of a millisecond)
// are not slowed at all.
var pacing = controller.Pacing{Factor: 2, Max: 250 * time.Millisecond, Burst: 250 * time.Millisecond}

// Config is what the controller needs.
type Config struct {
	API    resource.API
	Logger *slog.Logger
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Resync is the full resync period (DefaultResync when zero).
	Resync time.Duration
	// Cache is the controller manager's cache (controller.Config.Cache),
	// which the scheduler reads its tasks and the instances from.
	// Required.
	Cache *controller.Cache
}

// Controller returns the daemon scheduler's controller. Its requests are
// environments; it watches their deployments and tasks (owned by them)
// and every instance (an instance change may change what matches).
func Controller(cfg Config) (controller.Controller, error) {
	if cfg.Cache == nil {
		return controller.Controller{}, errors.New("daemon scheduler: Config.Cache is required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Resync == 0 {
		cfg.Resync = DefaultResync
	}
	r := &reconciler{api: cfg.API, now: cfg.Now, log: cfg.Logger.With("controller", ControllerName), cache: cfg.Cache, instances: newInstanceViews(cfg.Cache)}
	return controller.Controller{
		Name:        ControllerName,
		ManagedType: scheduler.EnvironmentType,
		Watches: []controller.Watch{
			{Type: scheduler.EnvironmentType, Map: controller.MapSelf},
			{Type: scheduler.DeploymentType, Map: controller.MapOwner},
			{Type: orchestrator.TaskType, Map: mapTask},
			{Type: orchestrator.InstanceType, Map: mapInstance},
		},
		Cached:       cachedTypes,
		Reconciler:   r,
		ResyncPeriod: cfg.Resync,
		Workers:      4,
		Pacing:       pacing,
	}, nil
}

type reconciler struct {
	api resource.API
	now func() time.Time
	log *slog.Logger

	cache     *controller.Cache
	instances *instanceViews

	// portsMu serializes the runs that may place fixed host ports
	// (ports.go).
	portsMu sync.Mutex
}

// mapTask maps a task to its environment, and to the environments the
// cache has blocked on its instance (it may have freed the host port they
// wait for).
func mapTask(ev controller.Event, look controller.Lookup) []controller.Request {
	return append(controller.MapOwner(ev, look), blockedBy(look.Cache(), ev.Resource)...)
}

// mapInstance asks for every environment, as the cache holds them:
// whether an instance matches is the reconciler's to decide, and
// environments are few.
func mapInstance(_ controller.Event, look controller.Lookup) []controller.Request {
	envs := look.Cache().List(scheduler.EnvironmentType)
	out := make([]controller.Request, 0, len(envs))
	for _, o := range envs {
		id := o.Resource.GetId()
		out = append(out, controller.Request{ID: &pbresource.ID{Type: id.GetType(), Tenancy: id.GetTenancy(), Name: id.GetName()}})
	}
	return out
}
