package catalogmodule

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/acl"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/httpapi"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage"
)

// checkOps refreshes TTL checks.
type checkOps struct {
	api resource.API
	now func() time.Time
}

func (o checkOps) routes() []httpapi.Route {
	const one = catalog.ChecksPath + "/{instance}/checks/{check}"
	return []httpapi.Route{
		{Pattern: "PUT " + one, Permission: acl.NamespaceWrite, Handler: o.put},
		{Pattern: one, Permission: acl.Public, Handler: httpapi.MethodNotAllowed("PUT")},
	}
}

// refresh sets check of the instance name in ns (catalog.RefreshTTLCheck),
// a compare-and-swap on the version read, reading again when a write
// lands in between, and returns the instance's health as readers see it.
func (o checkOps) refresh(ctx context.Context, ns, name, check string, body catalog.CheckRefresh) (*pbcatalog.ChecksStatus, error) {
	id := catalog.ServiceInstanceID(ns, name)
	for attempt := 0; ; attempt++ {
		resp, err := o.api.Read(ctx, &pbresource.ReadRequest{Id: id, Consistent: true})
		if err != nil {
			return nil, err
		}
		res := resp.GetResource()
		si, err := resource.DecodeData[*pbcatalog.ServiceInstance](res)
		if err != nil {
			return nil, err
		}
		next, err := catalog.RefreshTTLCheck(si, catalog.ServerChecksOf(res), check, body.Status, body.Note, o.now())
		switch {
		case errors.Is(err, catalog.ErrTaskChecks):
			return nil, status.Errorf(codes.FailedPrecondition, "%s/%s: %v", ns, name, err)
		case errors.Is(err, catalog.ErrNoSuchCheck), errors.Is(err, catalog.ErrNotTTL):
			return nil, httpapi.InputError("check", "%s/%s: %v", ns, name, err)
		case errors.Is(err, catalog.ErrBadCheckStatus):
			return nil, httpapi.InputError("status", "%v", err)
		case err != nil:
			return nil, httpapi.InputError("note", "%v", err)
		}
		payload, err := anypb.New(next)
		if err != nil {
			return nil, err
		}
		_, err = o.api.WriteStatus(resource.AsController(ctx, catalog.HealthControllerName), &pbresource.WriteStatusRequest{
			Id: res.GetId(), Version: res.GetVersion(), Key: catalog.ServerChecksStatusKey,
			Status: &pbresource.Status{ObservedGeneration: res.GetGeneration(), Data: payload},
		})
		if err == nil {
			return catalog.MergeHealth(si, catalog.AgentChecksOf(res), next), nil
		}
		if (status.Code(err) != codes.Aborted && !errors.Is(err, storage.ErrCASFailure)) || attempt == 9 {
			return nil, fmt.Errorf("refreshing check %s of %s/%s: %w", check, ns, name, err)
		}
	}
}

func (o checkOps) put(w http.ResponseWriter, r *http.Request) error {
	p, err := httpapi.Params(r, "namespace")
	if err != nil {
		return err
	}
	var body catalog.CheckRefresh
	if err := httpapi.DecodeJSON(r, &body); err != nil {
		return err
	}
	ns := p["namespace"]
	if ns == "" {
		ns = resource.DefaultNamespace
	}
	health, err := o.refresh(r.Context(), ns, r.PathValue("instance"), r.PathValue("check"), body)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, httpapi.ProtoJSON(health))
	return nil
}
