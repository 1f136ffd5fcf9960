package controllers

import (
	"errors"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/ids"
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
	r := &reconciler{api: cfg.API, now: cfg.Now, log: cfg.Logger.With("controller", ControllerName), envs: map[string]*pbresource.ID{}, cache: cfg.Cache, instances: newInstanceViews(cfg.Cache), tasks: newTaskViews(), blocked: newBlockedEnvs()}
	return controller.Controller{
		Name:        ControllerName,
		ManagedType: scheduler.EnvironmentType,
		Watches: []controller.Watch{
			{Type: scheduler.EnvironmentType, Map: r.mapEnvironment},
			{Type: scheduler.DeploymentType, Map: controller.MapOwner},
			{Type: orchestrator.TaskType, Map: r.mapTask},
			{Type: orchestrator.InstanceType, Map: r.mapInstance},
		},
		Cached:       cachedTypes,
		Reconciler:   r,
		ResyncPeriod: cfg.Resync,
		Workers:      4,
		Pacing:       pacing,
		OnStart:      r.startTerm,
	}, nil
}

type reconciler struct {
	api resource.API
	now func() time.Time
	log *slog.Logger

	mu   sync.Mutex
	envs map[string]*pbresource.ID // every environment, for mapInstance

	cache     *controller.Cache
	instances *instanceViews
	tasks     *taskViews

	// portsMu serializes the runs that may place fixed host ports
	// (ports.go); blocked remembers where environments are blocked.
	portsMu sync.Mutex
	blocked *blockedEnvs
}

func (r *reconciler) mapEnvironment(ev controller.Event, look controller.Lookup) []controller.Request {
	id := ev.Resource.GetId()
	key := ids.String(id)
	r.mu.Lock()
	if ev.Deleted {
		delete(r.envs, key)
		r.instances.forget(envKey(id))
		r.tasks.forget(envKey(id))
		r.blocked.set(id, nil)
	} else {
		c := proto.Clone(id).(*pbresource.ID)
		c.Uid = ""
		r.envs[key] = c
	}
	r.mu.Unlock()
	return controller.MapSelf(ev, look)
}

// startTerm forgets what was derived from an earlier term's cache: while
// another server led, instances and tasks changed without this server's
// watches seeing it. The Manager lists them into the cache again.
func (r *reconciler) startTerm() {
	r.instances.changed()
	r.tasks.reset()
}

// mapTask notes that an environment's tasks changed and maps the task to
// its environment, and to the environments blocked on its instance (it
// may have freed the host port they wait for).
func (r *reconciler) mapTask(ev controller.Event, look controller.Lookup) []controller.Request {
	r.tasks.changed(ev.Resource.GetOwner(), ev.Resource.GetId().GetName())
	return append(controller.MapOwner(ev, look), r.blocked.requests(r.cache, ev.Resource)...)
}

// mapInstance notes that the instances changed and asks for every
// environment: whether an instance matches is the reconciler's to decide,
// and environments are few.
func (r *reconciler) mapInstance(ev controller.Event, _ controller.Lookup) []controller.Request {
	r.instances.changed()
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]controller.Request, 0, len(r.envs))
	for _, id := range r.envs {
		out = append(out, controller.Request{ID: id})
	}
	return out
}
