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
	"trellis.dev/trellis/internal/resource"
)

// DefaultHealthResync is how often the health controller looks at every
// instance again: its TTL verdicts requeue themselves, so this only
// repairs.
const DefaultHealthResync = 5 * time.Minute

// HealthController is the servers' controller that owns a
// ServiceInstance's catalog.ServerChecksStatusKey. For now it expires the
// TTL checks of instances registered from outside Trellis
// (catalog.ExpireTTLChecks): it reconciles each instance, writes the
// checks that ran out critical, and runs again when the next one would.
// It declares catalog.InstancesCached, so the leader's cache keeps the
// instances by service for every controller.
func HealthController(api resource.API, now func() time.Time, log *slog.Logger) []controller.Controller {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &healthReconciler{api: api, now: now, log: log.With("controller", catalog.HealthControllerName)}
	return []controller.Controller{{
		Name:         catalog.HealthControllerName,
		ManagedType:  catalog.ServiceInstanceType,
		Cached:       catalog.InstancesCached,
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
	next, wait := catalog.ExpireTTLChecks(si, catalog.ServerChecksOf(res), r.now())
	if next != nil {
		payload, err := anypb.New(next)
		if err != nil {
			return controller.Terminal(err)
		}
		// A CAS on the version read: a refresh that lands meanwhile wins,
		// and the next run judges it.
		if _, err := r.api.WriteStatus(resource.AsController(ctx, catalog.HealthControllerName), &pbresource.WriteStatusRequest{
			Id: res.GetId(), Version: res.GetVersion(), Key: catalog.ServerChecksStatusKey,
			Status: &pbresource.Status{ObservedGeneration: res.GetGeneration(), Data: payload},
		}); err != nil {
			return fmt.Errorf("expiring the TTL checks of %s: %w", res.GetId().GetName(), err)
		}
		r.log.Info("TTL checks expired", "instance", res.GetId().GetName(), "namespace", res.GetId().GetTenancy().GetNamespace(), "health", next.GetHealth())
	}
	if wait > 0 {
		return controller.RequeueAfter(wait)
	}
	return nil
}
