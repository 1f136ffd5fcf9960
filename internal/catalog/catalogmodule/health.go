package catalogmodule

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
)

// DefaultHealthResync is how often the health controller looks at every
// instance again: its TTL verdicts requeue themselves, so this only
// repairs.
const DefaultHealthResync = 5 * time.Minute

// HealthController is the servers' controller that owns a
// ServiceInstance's catalog.ServerChecksStatusKey. It reconciles each
// instance: one registered from outside Trellis has its TTL checks expired
// (catalog.ExpireTTLChecks: the checks that ran out written critical, and
// a run again when the next one would); one of a task has every check set
// critical while the agent of the Instance it runs on is marked down, and
// that verdict withdrawn once the agent is back (catalog.DownVerdict). It
// watches Instances, and maps a change of one to the service instances
// on it (catalog.InstancesByInstance). It declares catalog.HealthCached,
// so the leader's cache keeps the instances by service and by instance
// for every controller.
func HealthController(api resource.API, now func() time.Time, log *slog.Logger) []controller.Controller {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &healthReconciler{api: api, now: now, log: log.With("controller", catalog.HealthControllerName)}
	return []controller.Controller{{
		Name:        catalog.HealthControllerName,
		ManagedType: catalog.ServiceInstanceType,
		Cached:      catalog.HealthCached,
		Watches: []controller.Watch{
			{Type: orchestrator.InstanceType, Map: mapInstanceToServiceInstances},
		},
		Reconciler:   r,
		ResyncPeriod: DefaultHealthResync,
	}}
}

type healthReconciler struct {
	api resource.API
	now func() time.Time
	log *slog.Logger
}

func (r *healthReconciler) Reconcile(ctx context.Context, req controller.Request) error {
	resp, err := r.api.Read(ctx, &pbresource.ReadRequest{Id: req.ID})
	if status.Code(err) == codes.NotFound {
		return nil
	}
	if err != nil {
		return err
	}
	res := resp.GetResource()
	si, err := resource.DecodeData[*pbcatalog.ServiceInstance](res)
	if err != nil {
		return controller.Terminal(err)
	}
	if si.GetInstance() != "" {
		return r.judgeDown(ctx, res, si)
	}
	next, wait := catalog.ExpireTTLChecks(si, catalog.ServerChecksOf(res), r.now())
	if next != nil {
		// A refresh that lands meanwhile wins, and the next run judges it.
		if err := r.writeServerChecks(ctx, res, next); err != nil {
			return fmt.Errorf("expiring the TTL checks of %s: %w", res.GetId().GetName(), err)
		}
		r.log.Info("TTL checks expired", "instance", res.GetId().GetName(), "namespace", res.GetId().GetTenancy().GetNamespace(), "health", next.GetHealth())
	}
	if wait > 0 {
		return controller.RequeueAfter(wait)
	}
	return nil
}

// mapInstanceToServiceInstances maps a change of an Instance (marked down,
// registered again, deleted) to the service instances of the tasks on it.
func mapInstanceToServiceInstances(ev controller.Event, look controller.Lookup) []controller.Request {
	objs := catalog.InstancesOn(look.Cache(), ev.Resource.GetId().GetName())
	reqs := make([]controller.Request, 0, len(objs))
	for _, o := range objs {
		reqs = append(reqs, controller.Request{ID: o.Resource.GetId()})
	}
	return reqs
}

// judgeDown writes the servers' verdict on an instance of a task
// (catalog.DownVerdict): every check critical while the agent of its
// Instance is down, withdrawn once it is back.
func (r *healthReconciler) judgeDown(ctx context.Context, res *pbresource.Resource, si *pbcatalog.ServiceInstance) error {
	down := false
	inst, err := r.api.Read(ctx, &pbresource.ReadRequest{Id: orchestrator.InstanceID(si.GetInstance())})
	switch {
	case status.Code(err) == codes.NotFound:
		down = true // no agent is there to report
	case err != nil:
		return err
	default:
		in, err := orchestrator.DecodeInstance(inst.GetResource())
		if err != nil {
			return controller.Terminal(err)
		}
		down = in.GetStatus() == orchestrator.InstanceDown
	}
	next := catalog.DownVerdict(si, catalog.AgentChecksOf(res), catalog.ServerChecksOf(res), down, r.now())
	if next == nil {
		return nil
	}
	// An agent report that lands meanwhile is judged by the next run.
	if err := r.writeServerChecks(ctx, res, next); err != nil {
		return fmt.Errorf("judging the checks of %s, whose agent is down=%t: %w", res.GetId().GetName(), down, err)
	}
	if down {
		r.log.Info("checks set critical: the instance's agent is down", "instance", res.GetId().GetName(), "namespace", res.GetId().GetTenancy().GetNamespace(), "on", si.GetInstance())
	} else {
		r.log.Info("down verdict withdrawn: the instance's agent is back", "instance", res.GetId().GetName(), "namespace", res.GetId().GetTenancy().GetNamespace(), "on", si.GetInstance())
	}
	return nil
}

// writeServerChecks writes next as the servers' verdict on res's checks
// (catalog.ServerChecksStatusKey), as the health controller, with a CAS on
// the version read.
func (r *healthReconciler) writeServerChecks(ctx context.Context, res *pbresource.Resource, next *pbcatalog.ChecksStatus) error {
	payload, err := anypb.New(next)
	if err != nil {
		return controller.Terminal(err)
	}
	_, err = r.api.WriteStatus(resource.AsController(ctx, catalog.HealthControllerName), &pbresource.WriteStatusRequest{
		Id: res.GetId(), Version: res.GetVersion(), Key: catalog.ServerChecksStatusKey,
		Status: &pbresource.Status{ObservedGeneration: res.GetGeneration(), Data: payload},
	})
	return err
}
