package controllers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/orchestrator/heartbeat"
	"trellis.dev/trellis/internal/resource"
)

// Names of the controllers, in logs, metrics and status keys.
const (
	InstanceControllerName = orchestrator.DownStatusKey
	TaskControllerName     = orchestrator.LostStatusKey
)

// Defaults of Config.
const (
	DefaultTaskResync     = time.Minute
	DefaultInstanceResync = 5 * time.Minute
)

// inactiveRetry is how soon a verdict is asked again when the tracker is
// not active yet: the controllers and the tracker follow leadership each on
// their own, so the controllers may start a moment before it.
const inactiveRetry = 100 * time.Millisecond

// Config is what the orchestrator's controllers need.
type Config struct {
	// API is the resource service they read and write through. Required.
	API resource.API
	// Tracker keeps the heartbeats; its TTL is the one in stop reasons.
	// Required.
	Tracker *heartbeat.Tracker
	// Cache is the controller manager's cache (controller.Config.Cache):
	// the task controller finds the tasks of an instance there, and the
	// instance controller whether an instance changed since its last
	// verdict. Required.
	Cache *controller.Cache
	// TaskResync is how often the task controller reconciles every
	// instance and every task from the store (DefaultTaskResync when zero).
	TaskResync time.Duration
	// InstanceResync is the instance controller's (DefaultInstanceResync
	// when zero); its verdicts requeue themselves, so this only repairs.
	InstanceResync time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if c.API == nil {
		return c, errors.New("orchestrator controllers: Config.API is required")
	}
	if c.Tracker == nil {
		return c, errors.New("orchestrator controllers: Config.Tracker is required")
	}
	if c.Cache == nil {
		return c, errors.New("orchestrator controllers: Config.Cache is required")
	}
	if c.TaskResync == 0 {
		c.TaskResync = DefaultTaskResync
	}
	if c.InstanceResync == 0 {
		c.InstanceResync = DefaultInstanceResync
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// Controllers returns the instance controller and the task controller.
func Controllers(cfg Config) ([]controller.Controller, error) {
	ic, err := InstanceController(cfg)
	if err != nil {
		return nil, err
	}
	tc, err := TaskController(cfg)
	if err != nil {
		return nil, err
	}
	return []controller.Controller{ic, tc}, nil
}

// InstanceController marks down the instances whose heartbeats stopped.
// It reconciles every Instance: a ready or draining one is put to the
// tracker, and runs again when its heartbeat would expire; one that has
// expired is written down. Down, left and removed instances are forgotten
// by the tracker.
func InstanceController(cfg Config) (controller.Controller, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return controller.Controller{}, err
	}
	r := &instanceReconciler{
		api: cfg.API, tracker: cfg.Tracker, cache: cfg.Cache,
		log:    cfg.Logger.With("controller", InstanceControllerName),
		judged: map[string]judgement{},
	}
	return controller.Controller{
		Name:         InstanceControllerName,
		ManagedType:  orchestrator.InstanceType,
		Cached:       []controller.CachedType{{Type: orchestrator.InstanceType}},
		Reconciler:   r,
		OnStart:      r.startTerm,
		ResyncPeriod: cfg.InstanceResync,
		// Verdicts are a memory lookup and a read; the workers are there for
		// the writes when many instances go down at once.
		Workers: 4,
	}, nil
}

type instanceReconciler struct {
	api     resource.API
	tracker *heartbeat.Tracker
	cache   *controller.Cache
	log     *slog.Logger

	// Most runs are an instance's own requeue at its heartbeat deadline,
	// with nothing stored about it changed since it was last judged. Those
	// ask the tracker alone: reading and decoding the Instance on each
	// would cost the leader a read per instance per TTL for nothing. The
	// cache says whether the watch has seen another version since.
	mu     sync.Mutex
	judged map[string]judgement // instance -> what the last full run read
}

// judgement is the Instance a full run read as ready or draining.
type judgement struct{ session, version string }

// startTerm forgets what an earlier term judged: the first verdict on
// each instance reads it (an instance removed while another server led is
// forgotten here).
func (r *instanceReconciler) startTerm() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.judged = map[string]judgement{}
}

// unchanged returns what the last full run judged of the instance, when
// the cache (so the watch) has seen no other version of it since.
func (r *instanceReconciler) unchanged(name string) (judgement, bool) {
	r.mu.Lock()
	j, ok := r.judged[name]
	r.mu.Unlock()
	if !ok {
		return j, false
	}
	o := r.cache.Get(orchestrator.InstanceID(name))
	return j, o != nil && o.Resource.GetVersion() == j.version
}

func (r *instanceReconciler) setJudged(name string, j *judgement) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if j == nil {
		delete(r.judged, name)
		return
	}
	r.judged[name] = *j
}

func (r *instanceReconciler) Reconcile(ctx context.Context, req controller.Request) error {
	name := req.ID.GetName()
	if j, ok := r.unchanged(name); ok {
		l, err := r.tracker.Observe(name, j.session, j.version)
		if err == nil && !l.Expired {
			return controller.RequeueAfter(l.Deadline.Sub(r.tracker.Now()))
		}
		// Expired, or no tracker yet: judge from the store.
	}
	resp, err := r.api.Read(ctx, &pbresource.ReadRequest{Id: orchestrator.InstanceID(name)})
	if status.Code(err) == codes.NotFound {
		r.setJudged(name, nil)
		r.tracker.Forget(name)
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading instance %s: %w", name, err)
	}
	res := resp.GetResource()
	in, err := orchestrator.DecodeInstance(res)
	if err != nil {
		return controller.Terminal(fmt.Errorf("instance %s: %w", name, err))
	}
	switch in.GetStatus() {
	case orchestrator.InstanceReady, orchestrator.InstanceDraining:
	default:
		r.setJudged(name, nil)
		r.tracker.Forget(name)
		return nil
	}
	r.setJudged(name, &judgement{session: in.GetSession(), version: res.GetVersion()})
	l, err := r.tracker.Observe(name, in.GetSession(), res.GetVersion())
	if errors.Is(err, heartbeat.ErrNotLeader) {
		return controller.RequeueAfter(inactiveRetry)
	}
	if err != nil {
		return err
	}
	now := r.tracker.Now()
	if !l.Expired {
		return controller.RequeueAfter(l.Deadline.Sub(now))
	}

	// Expired: the tracker refuses this session's heartbeats from now on,
	// so the instance cannot come back between this verdict and the write.
	// The verdict is the controller's own status key, over the session
	// judged (orchestrator.MergeInstance); the data, the agent's and the
	// operator's, is left as it is, drain included, and its generation
	// with it. The write is a CAS on the version judged: if the agent
	// registered again meanwhile it fails, and the next run judges the
	// new version.
	payload, err := anypb.New(&pborch.InstanceDown{Session: in.GetSession(), DownSince: timestamppb.New(now)})
	if err != nil {
		return controller.Terminal(err)
	}
	if _, err := r.api.WriteStatus(resource.AsController(ctx, InstanceControllerName), &pbresource.WriteStatusRequest{
		Id: res.GetId(), Version: res.GetVersion(), Key: orchestrator.DownStatusKey,
		Status: &pbresource.Status{ObservedGeneration: res.GetGeneration(), Data: payload},
	}); err != nil {
		return fmt.Errorf("marking instance %s down: %w", name, err)
	}
	r.setJudged(name, nil)
	r.tracker.Forget(name)
	r.log.Warn("instance down: no heartbeat", "instance", name, "ttl", r.tracker.TTL(),
		"last_heard", l.Deadline.Add(-r.tracker.TTL()).Format(time.RFC3339Nano))
	return nil
}
