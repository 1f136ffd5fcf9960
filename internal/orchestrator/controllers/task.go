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
// instance are written in one batch. It reconciles an instance when the
// instance changes and when a live task lands on it (not on each report
// of that task); every TaskResync it reconciles every instance and every
// task from the store, which repairs whatever a missed report or a
// leader's crash between two writes left wrong.
func TaskController(cfg Config) (controller.Controller, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return controller.Controller{}, err
	}
	r := &taskReconciler{
		api: cfg.API, ttl: cfg.Tracker.TTL(), now: cfg.Tracker.Now, index: newPlacements(),
		log: cfg.Logger.With("controller", TaskControllerName),
	}
	return controller.Controller{
		Name:         TaskControllerName,
		ManagedType:  orchestrator.InstanceType,
		Watches:      []controller.Watch{{Type: orchestrator.TaskType, Map: r.mapTask}},
		Reconciler:   r,
		ResyncPeriod: cfg.TaskResync,
		Workers:      2,
	}, nil
}

type taskReconciler struct {
	api   resource.API
	ttl   time.Duration
	now   func() time.Time
	index *placements
	log   *slog.Logger
}

// mapTask keeps the index of live tasks by instance and maps a live task
// to its instance. The index is why this mapper is not pure: the store has
// no index of tasks by instance, and listing every task to find one
// instance's would cost the leader O(all tasks) for each instance that
// goes down. It is fed by the Manager's task watch (a full list at every
// gain of leadership and every resync, then each change), and the
// reconciler reads every task it names, so an entry the watch never saw
// deleted is dropped when it is read.
func (r *taskReconciler) mapTask(ev controller.Event, _ controller.Lookup) []controller.Request {
	id := ev.Resource.GetId()
	if id == nil {
		return nil
	}
	key := taskKey(id)
	if ev.Deleted {
		r.index.remove(key)
		return nil
	}
	t, err := resource.DecodeData[*pborch.Task](ev.Resource)
	if err != nil || !orchestrator.TaskLive(t.GetLastStatus()) || t.GetInstance() == "" {
		r.index.remove(key)
		return nil
	}
	if !r.index.set(key, id, t.GetInstance()) {
		// A report of a task already indexed on this instance: the verdict
		// on the instance depends on which live tasks it has, not on their
		// states, so there is nothing new to judge. (A run that failed is
		// retried by its own requeue; the instance's changes map here too.)
		return nil
	}
	return []controller.Request{{ID: orchestrator.InstanceID(t.GetInstance())}}
}

func (r *taskReconciler) Reconcile(ctx context.Context, req controller.Request) error {
	name := req.ID.GetName()
	instances := map[string]InstanceState{}
	resp, err := r.api.Read(ctx, &pbresource.ReadRequest{Id: orchestrator.InstanceID(name)})
	switch {
	case status.Code(err) == codes.NotFound:
	case err != nil:
		return fmt.Errorf("reading instance %s: %w", name, err)
	default:
		in, err := resource.DecodeData[*pborch.Instance](resp.GetResource())
		if err != nil {
			return controller.Terminal(fmt.Errorf("instance %s: %w", name, err))
		}
		switch in.GetStatus() {
		case orchestrator.InstanceReady, orchestrator.InstanceDraining:
			return nil // its tasks are its agent's to report
		}
		instances[name] = InstanceState{Status: in.GetStatus()}
	}

	ids := r.index.on(name)
	if len(ids) == 0 {
		return nil
	}
	stored := make(map[string]*pbresource.Resource, len(ids))
	states := make([]TaskState, 0, len(ids))
	for _, id := range ids {
		key := taskKey(id)
		resp, err := r.api.Read(ctx, &pbresource.ReadRequest{Id: id})
		if status.Code(err) == codes.NotFound {
			r.index.remove(key)
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
			// Not on this instance (any more): the index followed an old copy.
			continue
		}
		stored[key] = resp.GetResource()
		states = append(states, TaskState{Key: key, Instance: t.GetInstance(), LastStatus: t.GetLastStatus()})
	}

	lost := PlanLost(instances, states, r.ttl)
	if len(lost) == 0 {
		return nil
	}
	now := timestamppb.New(r.now())
	writes := make([]*pbresource.Resource, 0, len(lost))
	for _, l := range lost {
		res := stored[l.Key]
		t, err := resource.DecodeData[*pborch.Task](res)
		if err != nil {
			return controller.Terminal(err)
		}
		t.LastStatus = orchestrator.StatusLost
		t.StopReason = l.Reason
		t.StoppedAt = now
		data, err := anypb.New(t)
		if err != nil {
			return controller.Terminal(err)
		}
		// res carries the version read: each member is a CAS, so a report
		// the agent made meanwhile fails the batch, and the next run decides
		// on it.
		res.Data = data
		writes = append(writes, res)
	}
	for start := 0; start < len(writes); start += maxBatch {
		batch := writes[start:min(start+maxBatch, len(writes))]
		if _, err := r.api.WriteBatch(ctx, &pbresource.WriteBatchRequest{Resources: batch}); err != nil {
			return fmt.Errorf("marking %d tasks of instance %s lost: %w", len(batch), name, err)
		}
		for _, res := range batch {
			r.index.remove(taskKey(res.GetId()))
		}
	}
	r.log.Warn("tasks lost with their instance", "instance", name, "tasks", len(writes), "reason", lost[0].Reason)
	return nil
}

// taskKey names a task in the index and in plans: namespace/name.
func taskKey(id *pbresource.ID) string {
	return id.GetTenancy().GetNamespace() + "/" + id.GetName()
}
