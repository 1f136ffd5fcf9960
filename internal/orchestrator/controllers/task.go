package controllers

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
)

// maxBatch bounds the tasks one WriteBatch marks lost (the service takes
// up to resource.MaxBatchMembers; smaller batches keep Raft entries small).
const maxBatch = 500

// TaskController marks LOST the live tasks of instances that are down,
// have left or are gone. Its requests are instances, not tasks: what
// becomes of a task follows from its instance, and the tasks of one
// instance are written in one batch. It finds an instance's tasks in the
// controllers' cache (orchestrator.LiveTasksByInstance). It reconciles an
// instance when the instance changes, and when a live task changes while
// its instance is not ready or draining in the cache (not on each report
// of a task on a live instance); every TaskResync it reconciles every
// instance and every task from the store, which repairs whatever a missed
// report or a leader's crash between two writes left wrong.
func TaskController(cfg Config) (controller.Controller, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return controller.Controller{}, err
	}
	r := &taskReconciler{
		api: cfg.API, ttl: cfg.Tracker.TTL(), now: cfg.Tracker.Now, cache: cfg.Cache,
		log: cfg.Logger.With("controller", TaskControllerName),
	}
	return controller.Controller{
		Name:        TaskControllerName,
		ManagedType: orchestrator.InstanceType,
		Watches:     []controller.Watch{{Type: orchestrator.TaskType, Map: mapTask}},
		Cached: []controller.CachedType{
			{Type: orchestrator.TaskType, Indexes: []*controller.Index{orchestrator.LiveTasksByInstance}},
			{Type: orchestrator.InstanceType, Derived: []*controller.Derived{orchestrator.MergedInstance}},
		},
		Reconciler:   r,
		ResyncPeriod: cfg.TaskResync,
		Workers:      2,
	}, nil
}

type taskReconciler struct {
	api   resource.API
	ttl   time.Duration
	now   func() time.Time
	cache *controller.Cache
	log   *slog.Logger
}

// mapTask maps a live, placed task to its instance, unless the cache has
// that instance ready or draining: the verdict on a live instance is that
// its tasks are its agent's to report, so a task placed there, or a report
// of one, has nothing to judge. When such an instance goes down, its own
// change maps to it, and the cache, which takes every event before it is
// mapped, already holds the task: whichever of the two changes the cache
// takes last, its mapping sees the other.
func mapTask(ev controller.Event, look controller.Lookup) []controller.Request {
	if ev.Deleted || ev.Resource.GetId() == nil {
		return nil
	}
	t := taskOf(ev.Resource, look.Cache())
	if t == nil || !orchestrator.TaskLive(orchestrator.TaskStatusOf(ev.Resource).GetLastStatus()) || t.GetInstance() == "" {
		return nil
	}
	if o := look.Cache().Get(orchestrator.InstanceID(t.GetInstance())); o != nil {
		if in, ok := orchestrator.CachedInstance(o); ok {
			switch in.GetStatus() {
			case orchestrator.InstanceReady, orchestrator.InstanceDraining:
				return nil
			}
		}
	}
	return []controller.Request{{ID: orchestrator.InstanceID(t.GetInstance())}}
}

// taskOf is a task's data: the cache's, decoded already, when the cache
// holds this very resource (the watch's events), else decoded here (a
// resync's list may be ahead of the cache). Nil when it does not decode.
func taskOf(res *pbresource.Resource, cache *controller.Cache) *pborch.Task {
	if o := cache.Get(res.GetId()); o != nil && o.Resource == res {
		t, _ := controller.Decoded[*pborch.Task](o)
		return t
	}
	t, err := resource.DecodeData[*pborch.Task](res)
	if err != nil {
		return nil
	}
	return t
}

// instanceOf is the stored Instance res, merged: the cache's when it holds
// this very version (merged once, when the cache took it), else decoded
// here. The resync reconciles every instance each TaskResync, almost all
// of them ready; decoding each one again (its data and its agent's
// registration) took the leader about a second of CPU at 5,000 instances,
// once a minute, which stalled whatever deployment was running then.
func (r *taskReconciler) instanceOf(res *pbresource.Resource) (*pborch.Instance, error) {
	if o := r.cache.Get(res.GetId()); o != nil && o.Resource.GetVersion() == res.GetVersion() {
		if in, ok := orchestrator.CachedInstance(o); ok {
			return in, nil
		}
	}
	return orchestrator.DecodeInstance(res)
}

func (r *taskReconciler) Reconcile(ctx context.Context, req controller.Request) error {
	// It alone writes a task's lost verdict (orchestrator.LostStatusKey).
	ctx = resource.AsController(ctx, TaskControllerName)
	name := req.ID.GetName()
	instances := map[string]InstanceState{}
	resp, err := r.api.Read(ctx, &pbresource.ReadRequest{Id: orchestrator.InstanceID(name)})
	switch {
	case status.Code(err) == codes.NotFound:
	case err != nil:
		return fmt.Errorf("reading instance %s: %w", name, err)
	default:
		in, err := r.instanceOf(resp.GetResource())
		if err != nil {
			return controller.Terminal(fmt.Errorf("instance %s: %w", name, err))
		}
		switch in.GetStatus() {
		case orchestrator.InstanceReady, orchestrator.InstanceDraining:
			return nil // its tasks are its agent's to report
		}
		instances[name] = InstanceState{Status: in.GetStatus()}
	}

	// The cache names the candidates: the tasks on this instance that were
	// not STOPPED when it last saw them (of which the live ones count) (one that ended and was revived since is
	// mapped here again by the change that revived it). Each is read from
	// the store, and the decision and its compare-and-swap are on what was
	// read: a deletion or a report the cache has not taken yet is not
	// overwritten, nor does it fail the batch.
	stored := map[string]*pbresource.Resource{}
	var states []TaskState
	for _, o := range r.cache.ByIndex(orchestrator.TaskType, orchestrator.LiveTasksByInstance.Name, name) {
		if _, ok := controller.Decoded[*pborch.Task](o); !ok || !orchestrator.TaskLive(orchestrator.TaskStatusOf(o.Resource).GetLastStatus()) {
			continue
		}
		id := o.Resource.GetId()
		key := taskKey(id)
		resp, err := r.api.Read(ctx, &pbresource.ReadRequest{Id: &pbresource.ID{Type: id.GetType(), Tenancy: id.GetTenancy(), Name: id.GetName()}})
		if status.Code(err) == codes.NotFound {
			continue
		}
		if err != nil {
			return fmt.Errorf("reading task %s: %w", key, err)
		}
		t, err := resource.DecodeData[*pborch.Task](resp.GetResource())
		if err != nil {
			r.log.Error("task does not decode; leaving it", "task", key, "error", err)
			continue
		}
		if t.GetInstance() != name {
			// Not on this instance: another incarnation, elsewhere.
			continue
		}
		stored[key] = resp.GetResource()
		states = append(states, TaskState{Key: key, Instance: t.GetInstance(), LastStatus: orchestrator.TaskStatusOf(resp.GetResource()).GetLastStatus()})
	}

	lost := PlanLost(instances, states, r.ttl)
	if len(lost) == 0 {
		return nil
	}
	now := timestamppb.New(r.now())
	writes := make([]*pbresource.WriteStatusRequest, 0, len(lost))
	for _, l := range lost {
		res := stored[l.Key]
		// The verdict names the agent's report it is made over: it holds
		// until the agent reports again (orchestrator.MergeTaskStatus).
		payload, err := anypb.New(&pborch.TaskLost{
			Reason: l.Reason, LostAt: now,
			ReportedAt: orchestrator.AgentStatusOf(res).GetReportedAt(),
		})
		if err != nil {
			return controller.Terminal(err)
		}
		// Each member carries the version read: a CAS, so a report the
		// agent made meanwhile fails that member, and the next run decides
		// on it.
		writes = append(writes, &pbresource.WriteStatusRequest{
			Id: res.GetId(), Version: res.GetVersion(), Key: orchestrator.LostStatusKey,
			Status: &pbresource.Status{ObservedGeneration: res.GetGeneration(), Data: payload},
		})
	}
	stale := 0
	for start := 0; start < len(writes); start += maxBatch {
		batch := writes[start:min(start+maxBatch, len(writes))]
		resp, err := r.api.WriteStatuses(ctx, &pbresource.WriteStatusesRequest{Statuses: batch})
		if err != nil {
			return fmt.Errorf("marking %d tasks of instance %s lost: %w", len(batch), name, err)
		}
		for _, res := range resp.GetResults() {
			if _, err := resource.StatusResult(res); err != nil {
				stale++
			}
		}
	}
	if stale > 0 {
		// Reported or deleted meanwhile: decide again on what is stored.
		return fmt.Errorf("marking the tasks of instance %s lost: %d of %d changed meanwhile", name, stale, len(writes))
	}
	r.log.Warn("tasks lost with their instance", "instance", name, "tasks", len(writes), "reason", lost[0].Reason)
	return nil
}

// taskKey names a task in the index and in plans: namespace/name.
func taskKey(id *pbresource.ID) string {
	return id.GetTenancy().GetNamespace() + "/" + id.GetName()
}
