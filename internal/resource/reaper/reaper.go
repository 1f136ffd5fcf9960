package reaper

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/resource"
)

// ControllerName is the reaper's controller name (in logs and metrics).
const ControllerName = "owner-reaper"

// Defaults of the declaration Controller returns; the caller may change
// them before registering it.
const (
	DefaultWorkers      = 4
	DefaultResyncPeriod = time.Hour
)

// ErrOwnerTypeUnknown: an owner's type is not registered, so the reaper
// cannot tell whether the owner exists.
var ErrOwnerTypeUnknown = errors.New("owner type is not registered")

// Controller returns the reaper's declaration. It watches every type
// registered in reg when it is called: call it after every type is
// registered.
func Controller(client resource.API, reg *resource.Registry) controller.Controller {
	var watches []controller.Watch
	for _, r := range reg.Types() {
		watches = append(watches, controller.Watch{Type: r.Type, Map: Map})
	}
	return controller.Controller{
		Name:         ControllerName,
		Watches:      watches,
		Reconciler:   &Reconciler{Client: client, Registry: reg},
		Workers:      DefaultWorkers,
		ResyncPeriod: DefaultResyncPeriod,
	}
}

// Map is the reaper's mapper: a resource written with an owner asks for a
// reconcile of that owner incarnation; a deleted resource asks for a
// reconcile of itself, the incarnation that is gone, to reap what it owned.
func Map(ev controller.Event, _ controller.Lookup) []controller.Request {
	if ev.Deleted {
		if id := ev.Resource.GetId(); id.GetUid() != "" {
			return []controller.Request{{ID: id}}
		}
		return nil
	}
	if owner := ev.Resource.GetOwner(); owner.GetUid() != "" {
		return []controller.Request{{ID: owner}}
	}
	return nil
}

// Reconciler reaps the resources of owner incarnations that are gone.
type Reconciler struct {
	Client   resource.API
	Registry *resource.Registry
}

// Reconcile looks at one owner incarnation (req.ID, uid included): when it
// is no longer stored, it deletes every resource that names it as owner.
// It acts as in-process operations (resource.FromOperations): the owner,
// or what it owned, may be of a sealed type, which the generic calls
// refuse to anyone else, and a sealed resource must go with its owner.
func (r *Reconciler) Reconcile(ctx context.Context, req controller.Request) error {
	ctx = resource.FromOperations(ctx)
	owner := req.ID
	if owner.GetUid() == "" {
		return nil // an owner is always named with its uid
	}
	if _, ok := r.Registry.Resolve(owner.GetType()); !ok {
		return controller.Terminal(fmt.Errorf("%w: %s", ErrOwnerTypeUnknown, ids.TypeString(owner.GetType())))
	}
	alive, err := r.exists(ctx, owner)
	if err != nil || alive {
		return err
	}
	resp, err := r.Client.ListByOwner(ctx, &pbresource.ListByOwnerRequest{Owner: owner})
	if err != nil {
		return fmt.Errorf("list what %s owned: %w", ids.String(owner), err)
	}
	var errs []error
	for _, res := range resp.GetResources() {
		// The id carries the uid: a resource re-created under the same name
		// since the list is another incarnation, and is not deleted.
		_, err := r.Client.Delete(ctx, &pbresource.DeleteRequest{Id: res.GetId()})
		if err != nil && status.Code(err) != codes.NotFound {
			errs = append(errs, fmt.Errorf("delete %s: %w", ids.String(res.GetId()), err))
		}
	}
	return errors.Join(errs...)
}

// exists reports whether the owner incarnation is stored. This server's
// own store answers first: an owner it holds is alive as far as this
// reconcile needs (were its deletion committed and not yet applied here,
// the deletion's own event maps to a reconcile of it when it is). Only an
// owner this store does not hold is read again with strong consistency
// (it may have been created by an entry not yet applied here). Every
// write of an owned resource asks for its owner (Map): a strong read
// each, a leadership check with the followers, made the reaper the most
// frequent reconcile of a deployment for nothing.
func (r *Reconciler) exists(ctx context.Context, owner *pbresource.ID) (bool, error) {
	byName := proto.Clone(owner).(*pbresource.ID)
	byName.Uid = ""
	for _, consistent := range []bool{false, true} {
		resp, err := r.Client.Read(ctx, &pbresource.ReadRequest{Id: byName, Consistent: consistent})
		switch {
		case status.Code(err) == codes.NotFound:
			continue
		case err != nil:
			return false, fmt.Errorf("read owner %s: %w", ids.String(owner), err)
		}
		if resp.GetResource().GetId().GetUid() == owner.GetUid() {
			return true, nil
		}
	}
	return false, nil
}
